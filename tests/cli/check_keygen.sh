#!/usr/bin/env bash
# keygen writes a 0600 secret file and a .pub with the same public key, and refuses to
# overwrite without --force. (A Z85 key may begin with "-": grep gets it through -e.)
set -euo pipefail
coord="$1"
d="$(mktemp -d)"
trap 'rm -rf "$d"' EXIT
out="$("$coord" keygen "$d/k")"
[ "$(stat -c %a "$d/k")" = 600 ] || { echo "secret file mode is not 0600"; exit 1; }
pub="$(sed -n 's/^public-key = "\(.*\)"$/\1/p' "$d/k.pub")"
[ ${#pub} -eq 40 ] || { echo "no 40-character public key in k.pub"; exit 1; }
grep -q "secret-key = \"" "$d/k" || { echo "no secret key in k"; exit 1; }
grep -qF -e "$pub" "$d/k" || { echo "k and k.pub disagree"; exit 1; }
echo "$out" | grep -qF -e "$pub" || { echo "printed key differs"; exit 1; }
if "$coord" keygen "$d/k" 2>/dev/null; then echo "overwrote without --force"; exit 1; fi
"$coord" keygen "$d/k" --force >/dev/null
! grep -qF -e "$pub" "$d/k.pub" || { echo "--force did not write a new key"; exit 1; }
echo "1 passed, 0 failed"
