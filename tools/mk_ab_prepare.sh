#!/usr/bin/env bash
# Prepares the bases of a device A/B (tools/mk_ab_base.sh) small enough to
# travel: for each NAME=REV, .ab_base/NAME/ holds only the files of src/ that
# differ between REV and this checkout (REV's version), and
# .ab_base/NAME/DELETE the files of this checkout's src/ that REV lacks
# (whole src/ copies of three bases took the tree past the device tool's
# 64 MiB). On the device, `tools/mk_ab_prepare.sh --expand` turns each into
# a full .ab_full/NAME/src (this tree's src/ with the differences applied).
#   here:   tools/mk_ab_prepare.sh main=main round14=next/round14 ...
#   device: tools/mk_ab_prepare.sh --expand     (then BASES="NAME:.ab_full/NAME/src ...")
# The differences are against HEAD: commit first, and send that checkout
# (the device's src/ must be HEAD's). .ab_base and .ab_full are untracked
# scratch: delete them after the call.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = "--expand" ]; then
  for d in .ab_base/*/; do
    name=$(basename "$d")
    rm -rf ".ab_full/$name" && mkdir -p ".ab_full/$name"
    cp -r src ".ab_full/$name/src"
    [ -d "$d/src" ] && cp -r "$d/src/." ".ab_full/$name/src/"
    [ -f "$d/DELETE" ] && (cd ".ab_full/$name" && xargs -r rm -f < "../../$d/DELETE")
    echo "base $name: $(find "$d/src" -type f 2> /dev/null | wc -l) files differ, $(wc -l < "$d/DELETE") removed"
  done
  exit 0
fi
rm -rf .ab_base
for spec in "$@"; do
  name=${spec%%=*}
  rev=${spec#*=}
  mkdir -p ".ab_base/$name"
  git diff --name-only --diff-filter=d HEAD "$rev" -- src | while read -r f; do
    mkdir -p ".ab_base/$name/$(dirname "$f")"
    git show "$rev:$f" > ".ab_base/$name/$f"
  done
  git diff --name-only --diff-filter=D HEAD "$rev" -- src > ".ab_base/$name/DELETE"
  echo "base $name ($rev): $(find ".ab_base/$name" -type f -path '*/src/*' | wc -l) files, $(wc -l < ".ab_base/$name/DELETE") to remove"
done
