// What the farm's transport needs for its security rules (docs/farm.md, "Security"): which
// endpoints stay on this machine, and CURVE key pairs in files. Workers run code that the
// coordinator sends, so anything beyond loopback is authenticated both ways with CURVE: the
// coordinator checks workers against an allow-list of public keys (a ZAP handler), and
// workers pin the coordinator's public key.
//
// Key files (written by write_curve_keypair, read by read_curve_keys):
//   # dc farm CURVE key (ZeroMQ Z85)
//   public-key = "rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7"
//   secret-key = "JTKVSB%%)wK0E.X)V>+}o?pNmC{O&4W4b!Ni{Lh6"
// The secret file is created with mode 0600; NAME.pub holds only the public line, and is
// what goes into the other side's allow-list. An allow-list file holds public keys, one per
// line, either bare Z85 or as `public-key = "..."`; '#' starts a comment.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace dc::farm {

// True for endpoints that cannot be reached from another machine: inproc://, ipc://, and
// tcp:// on 127.0.0.0/8, ::1 or localhost. tcp://*:PORT and every other host are not.
bool is_loopback_endpoint(const std::string& endpoint);

struct CurveKeyPair {
  std::string public_key;  // 40 characters of Z85
  std::string secret_key;  // "" when only the public key is known
};

// A fresh pair from libzmq (zmq_curve_keypair). UserError if libzmq lacks CURVE.
CurveKeyPair generate_curve_keypair();
// The public key of a secret key (zmq_curve_public).
std::string curve_public_key(const std::string& secret_z85);

// Writes `path` (both keys, mode 0600) and `path`.pub (public key only). UserError when a
// file cannot be written.
void write_curve_keypair(const std::filesystem::path& path, const CurveKeyPair& keys);
// Reads a key file; `need_secret` makes a missing secret key a UserError. Keys are checked
// (40 Z85 characters that decode) and the public key is derived when only the secret is given.
CurveKeyPair read_curve_keys(const std::filesystem::path& path, bool need_secret);
// Public keys of an allow-list file, each checked. UserError naming the line otherwise.
std::vector<std::string> read_public_keys(const std::filesystem::path& path);

// True for 40 characters of Z85 that decode to 32 bytes.
bool is_z85_key(const std::string& key);
// The 32 raw bytes of a Z85 key (is_z85_key must hold).
std::string z85_key_bytes(const std::string& key);

}  // namespace dc::farm
