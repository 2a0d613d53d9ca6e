#!/usr/bin/env bash
# Check that every relative link in README.md, docs/ and configs/README.md resolves: the file
# exists, and a #fragment names a heading of that file (GitHub's heading ids). External links
# (http, https, mailto) are not fetched. Prints each broken link with its file and line; exits 1
# when there is one. Usage: scripts/check-doc-links.sh [FILE.md ...]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
if [ $# -eq 0 ]; then
    set -- README.md configs/README.md $(find docs -name '*.md' | sort)
fi
exec python3 - "$@" <<'EOF'
import os, re, sys, unicodedata

def slug(text):
    """GitHub's heading id: lowercase, drop punctuation and symbols, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link in a heading keeps its text
    out = []
    for ch in text.strip().lower():
        cat = unicodedata.category(ch)
        if ch in "-_" or cat[0] in "LNM":
            out.append(ch)
        elif ch == " ":
            out.append("-")
    return "".join(out)

def headings(path, cache={}):
    if path not in cache:
        ids, seen, fence = set(), {}, False
        for line in open(path, encoding="utf-8"):
            if line.lstrip().startswith("```"):
                fence = not fence
                continue
            m = None if fence else re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
            if m:
                base = slug(m.group(1))
                n = seen.get(base, 0)
                seen[base] = n + 1
                ids.add(base if n == 0 else f"{base}-{n}")
        cache[path] = ids
    return cache[path]

link = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
bad = checked = 0
for md in sys.argv[1:]:
    fence = False
    for no, line in enumerate(open(md, encoding="utf-8"), 1):
        if line.lstrip().startswith("```"):
            fence = not fence
            continue
        if fence:
            continue
        line = re.sub(r"`[^`]*`", "", line)  # code spans hold no links
        for target in link.findall(line):
            if re.match(r"[a-z][a-z0-9+.-]*:", target):
                continue
            checked += 1
            path, _, frag = target.partition("#")
            dest = os.path.normpath(os.path.join(os.path.dirname(md), path)) if path else md
            if not os.path.exists(dest):
                print(f"{md}:{no}: {target}: no such file {dest}")
                bad += 1
            elif frag:
                if os.path.isdir(dest) or not dest.endswith(".md"):
                    print(f"{md}:{no}: {target}: #{frag} on a file that is not markdown")
                    bad += 1
                elif frag not in headings(dest):
                    print(f"{md}:{no}: {target}: no heading #{frag} in {dest}")
                    bad += 1
print(f"check-doc-links: {checked} relative links in {len(sys.argv) - 1} files, {bad} broken", file=sys.stderr)
sys.exit(1 if bad else 0)
EOF
