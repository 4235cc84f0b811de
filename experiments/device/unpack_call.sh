#!/usr/bin/env bash
# After a device call, here, from the repository root: unpack its tarball into the working tree, so that
# the next call (which runs on a copy of this tree) skips what this one finished. Seconds, so it fits the
# machine's 30 s warm window; h100-grid28 and h100-runahead2 re-ran their predecessors' jobs without it.
#   usage: experiments/device/unpack_call.sh FILES_AT/TAG.tgz [...]
# Also: restores tracked files the tarball's slim tree lacked (experiments/device/slim_tree.sh), deletes the
# `.partial` records of runs the call's end cut off (their next call starts them afresh), and prints the
# call's GPU UUIDs and the last lines of its console, for the results' NOTES.md entry.
#   experiments/device/unpack_call.sh --pending [DEVICE_DIR]
#          before a call: names each tarball of the last call (the newest folder under DEVICE_DIR, by default
#          /work/.device) with a file not in this tree, and exits 1 if there is one (the seventy-fifth
#          session's second call ran x2-cl8's jobs again: x2-cl8's tarball was not unpacked)
set -euo pipefail
if [ "${1:-}" = --pending ]; then
    pending=0 last=$(ls -td "${2:-/work/.device}"/*/ 2>/dev/null | head -1 || true)
    [ -n "$last" ] || { echo "no call folder under ${2:-/work/.device}"; exit 0; }
    for tgz in "$last"*.tgz; do
        [ -s "$tgz" ] || continue
        while read -r f; do
            case $f in */) continue ;; esac
            if [ ! -e "$f" ]; then echo "not unpacked: $tgz (no $f here)"; pending=1; break; fi
        done < <(tar tzf "$tgz")
    done
    [ $pending = 0 ] && echo "the last call's tarballs ($last) are unpacked here"
    exit $pending
fi
[ $# -ge 1 ] || { echo "usage: $0 FILES_AT/TAG.tgz [...] | --pending [DEVICE_DIR]" >&2; exit 2; }
for tgz in "$@"; do
    [ -s "$tgz" ] || { echo "$tgz: no such tarball" >&2; exit 2; }
    tag=$(basename "$tgz" .tgz)
    new_partials=$(tar tzf "$tgz" | grep '\.partial$' || true)
    # a file changed here after the call began (NOTES.md, a regenerated figure) is newer: kept
    tar --keep-newer-files -xzf "$tgz" 2> >(grep -v 'is newer or same age' >&2)
    git ls-files --deleted -z | xargs -0 -r git checkout --
    for f in $new_partials; do   # only untracked ones: a committed .partial is history, left alone
        git ls-files --error-unmatch "$f" >/dev/null 2>&1 || rm -f "$f"
    done
    calls=$(tar tzf "$tgz" | grep "/calls/$tag\.gpus\.txt$" | head -1)
    echo "== $tag: $(grep -o 'GPU-[0-9a-f]*' "$calls" 2>/dev/null | tr '\n' ' ')"
    tail -4 "${calls%.gpus.txt}.console.log" 2>/dev/null | cut -c1-200
done
git status --short | grep -v '^??' | head -20 || true
echo "untracked: $(git status --short | grep -c '^??' || true) paths"
