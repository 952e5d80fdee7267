#include "farm_security.h"

#include <sys/stat.h>
#include <zmq.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "ir/error.h"

namespace dc::farm {
namespace {

std::string trim(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

// `name = "value"` or `name = value` -> value, when the line starts with `name`.
bool key_line(const std::string& line, const std::string& name, std::string* value) {
  const std::string t = trim(line);
  if (t.rfind(name, 0) != 0) return false;
  const size_t eq = t.find('=', name.size());
  if (eq == std::string::npos || !trim(t.substr(name.size(), eq - name.size())).empty()) return false;
  std::string v = trim(t.substr(eq + 1));
  if (v.size() >= 2 && v.front() == '"' && v.back() == '"') v = v.substr(1, v.size() - 2);
  *value = v;
  return true;
}

std::vector<std::string> read_lines(const std::filesystem::path& path) {
  std::ifstream in(path);
  DC_USER_CHECK(in, "cannot read key file ", path.string());
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

}  // namespace

bool is_loopback_endpoint(const std::string& endpoint) {
  if (endpoint.rfind("inproc://", 0) == 0 || endpoint.rfind("ipc://", 0) == 0) return true;
  if (endpoint.rfind("tcp://", 0) != 0) return false;
  std::string rest = endpoint.substr(6);
  // A ZeroMQ source address ("tcp://src;dst") names the far end after ';'.
  if (const size_t semi = rest.find(';'); semi != std::string::npos) rest = rest.substr(semi + 1);
  std::string host;
  if (!rest.empty() && rest.front() == '[') {
    const size_t close = rest.find(']');
    if (close == std::string::npos) return false;
    host = rest.substr(1, close - 1);
  } else {
    const size_t colon = rest.rfind(':');
    host = colon == std::string::npos ? rest : rest.substr(0, colon);
  }
  if (host == "localhost" || host == "::1") return true;
  // 127.0.0.0/8, written as a dotted quad.
  int parts[4];
  char tail = 0;
  if (std::sscanf(host.c_str(), "%d.%d.%d.%d%c", &parts[0], &parts[1], &parts[2], &parts[3], &tail) == 4)
    return parts[0] == 127 &&
           std::all_of(parts, parts + 4, [](int p) { return p >= 0 && p <= 255; });
  return false;
}

bool is_z85_key(const std::string& key) {
  if (key.size() != 40) return false;
  uint8_t bytes[32];
  return zmq_z85_decode(bytes, key.c_str()) != nullptr;
}

std::string z85_key_bytes(const std::string& key) {
  DC_INTERNAL_CHECK(is_z85_key(key), "not a Z85 key");
  uint8_t bytes[32];
  zmq_z85_decode(bytes, key.c_str());
  return std::string(reinterpret_cast<const char*>(bytes), 32);
}

CurveKeyPair generate_curve_keypair() {
  DC_USER_CHECK(zmq_has("curve"), "this libzmq was built without CURVE security");
  char pub[41], sec[41];
  DC_USER_CHECK(zmq_curve_keypair(pub, sec) == 0, "zmq_curve_keypair failed: ", zmq_strerror(zmq_errno()));
  return {pub, sec};
}

std::string curve_public_key(const std::string& secret_z85) {
  DC_USER_CHECK(is_z85_key(secret_z85), "not a CURVE secret key (40 characters of Z85)");
  char pub[41];
  DC_USER_CHECK(zmq_curve_public(pub, secret_z85.c_str()) == 0, "zmq_curve_public failed: ",
                zmq_strerror(zmq_errno()));
  return pub;
}

void write_curve_keypair(const std::filesystem::path& path, const CurveKeyPair& keys) {
  DC_USER_CHECK(is_z85_key(keys.public_key) && is_z85_key(keys.secret_key), "invalid CURVE key pair");
  const std::string header = "# dc farm CURVE key (ZeroMQ Z85)\n";
  const std::string pub_line = "public-key = \"" + keys.public_key + "\"\n";
  {
    // Create with 0600 before any secret is written.
    std::ofstream touch(path, std::ios::trunc);
    DC_USER_CHECK(touch, "cannot write key file ", path.string());
  }
  DC_USER_CHECK(::chmod(path.c_str(), 0600) == 0, "cannot make ", path.string(), " private");
  std::ofstream secret(path, std::ios::trunc);
  secret << header << pub_line << "secret-key = \"" << keys.secret_key << "\"\n";
  DC_USER_CHECK(secret.good(), "cannot write key file ", path.string());
  std::filesystem::path pub_path = path;
  pub_path += ".pub";
  std::ofstream pub(pub_path, std::ios::trunc);
  pub << header << pub_line;
  DC_USER_CHECK(pub.good(), "cannot write key file ", pub_path.string());
}

CurveKeyPair read_curve_keys(const std::filesystem::path& path, bool need_secret) {
  CurveKeyPair keys;
  for (const std::string& line : read_lines(path)) {
    std::string v;
    if (key_line(line, "public-key", &v)) keys.public_key = v;
    else if (key_line(line, "secret-key", &v)) keys.secret_key = v;
  }
  if (!keys.secret_key.empty()) {
    // As ssh refuses an unprotected private key: a secret others can read is no secret.
    struct stat st {};
    DC_USER_CHECK(::stat(path.c_str(), &st) == 0, "cannot stat key file ", path.string());
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    DC_USER_CHECK((st.st_mode & 077) == 0, path.string(), ": the secret key file is readable by group or others (mode ",
                  mode, "); refused: make it private with chmod 600 ", path.string());
    DC_USER_CHECK(is_z85_key(keys.secret_key), path.string(), ": secret-key is not a CURVE key (40 characters of Z85)");
    const std::string derived = curve_public_key(keys.secret_key);
    DC_USER_CHECK(keys.public_key.empty() || keys.public_key == derived, path.string(),
                  ": public-key does not belong to secret-key");
    keys.public_key = derived;
  }
  DC_USER_CHECK(!need_secret || !keys.secret_key.empty(), path.string(), " has no secret-key line");
  DC_USER_CHECK(is_z85_key(keys.public_key), path.string(), " has no valid public-key line");
  return keys;
}

std::vector<std::string> read_public_keys(const std::filesystem::path& path) {
  std::vector<std::string> keys;
  const std::vector<std::string> lines = read_lines(path);
  for (size_t i = 0; i < lines.size(); ++i) {
    std::string t = trim(lines[i]);
    if (t.empty() || t[0] == '#') continue;
    std::string v;
    if (key_line(t, "secret-key", &v)) continue;
    if (key_line(t, "public-key", &v)) t = v;
    DC_USER_CHECK(is_z85_key(t), path.string(), ":", i + 1, ": not a CURVE public key (40 characters of Z85)");
    keys.push_back(t);
  }
  return keys;
}

}  // namespace dc::farm
