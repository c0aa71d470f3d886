#!/usr/bin/env bash
# Copies the fortune text files of Debian's fortunes + fortunes-min packages into DEST_DIR,
# the DATA_DIR of train.py. Skips the *.dat indexes, the *.u8 links and any subdirectory
# (the offensive fortunes live in off/ when fortunes-off is installed).
#
#   tools/train_tiny/prepare_data.sh DEST_DIR [SOURCE_DIR]
#
# SOURCE_DIR defaults to /usr/share/games/fortunes (apt-get install fortunes fortunes-min).
set -euo pipefail

if [[ $# -lt 1 || $# -gt 2 ]]; then
  echo "usage: $0 DEST_DIR [SOURCE_DIR]" >&2
  exit 2
fi
dest=$1
src=${2:-/usr/share/games/fortunes}

if [[ ! -d "$src" ]]; then
  echo "error: source dir '$src' does not exist (apt-get install fortunes fortunes-min)" >&2
  exit 1
fi

mkdir -p "$dest"
count=0
for path in "$src"/*; do
  name=$(basename "$path")
  case "$name" in
    *.dat | *.u8 | .*) continue ;;
  esac
  # -f follows symlinks: only regular files (or links to them) are copied.
  [[ -f "$path" && ! -d "$path" ]] || continue
  cp -L "$path" "$dest/$name"
  count=$((count + 1))
done

if [[ $count -eq 0 ]]; then
  echo "error: no fortune files found in '$src'" >&2
  exit 1
fi
bytes=$(cat "$dest"/* | wc -c)
echo "copied $count fortune files ($bytes bytes) from $src to $dest"
