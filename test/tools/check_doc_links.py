#!/usr/bin/env python3
"""check_doc_links.py [ROOT] - every relative link in the documentation
resolves inside the repository.

Checks README.md, CHANGELOG.md and docs/*.md under ROOT (default: the
repository this script is in): each Markdown link or image [text](target)
outside code spans and fenced code blocks that is not a URL (http:, https:,
mailto:) must name a file or directory that exists under ROOT, without
leaving it; a #fragment on a Markdown file (or alone, for the same file)
must match one of that file's headings as GitHub makes anchors of them.
Prints each broken link as FILE:LINE: problem and exits 1 if there is one.
"""
import os
import re
import sys

LINK = re.compile(r'!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)')
FENCE = re.compile(r'^\s*(```|~~~)')


def text_lines(path):
    """(line number, text) of the lines outside fenced code blocks, with
    inline code spans blanked."""
    out = []
    fence = None
    with open(path, encoding='utf-8') as f:
        for n, line in enumerate(f, 1):
            m = FENCE.match(line)
            if m:
                if fence is None:
                    fence = m.group(1)
                elif m.group(1) == fence:
                    fence = None
                continue
            if fence is None:
                out.append((n, re.sub(r'`[^`]*`', lambda c: ' ' * len(c.group(0)), line)))
    return out


def slug(heading):
    s = heading.strip().lower()
    s = re.sub(r'\[([^\]]*)\]\([^)]*\)', r'\1', s)    # links in headings: their text
    s = re.sub(r'[^\w\- ]', '', s)
    return s.replace(' ', '-')


def anchors(path, cache={}):
    if path not in cache:
        seen = {}
        result = set()
        for _, line in text_lines(path):
            m = re.match(r'^(#{1,6})\s+(.*?)\s*#*\s*$', line)
            if not m:
                continue
            a = slug(m.group(2))
            if a in seen:
                seen[a] += 1
                result.add(f'{a}-{seen[a]}')
            else:
                seen[a] = 0
                result.add(a)
        with open(path, encoding='utf-8') as f:
            result.update(re.findall(r'<a\s+(?:name|id)="([^"]+)"', f.read()))
        cache[path] = result
    return cache[path]


def check(root):
    root = os.path.realpath(root)
    files = [os.path.join(root, f) for f in ('README.md', 'CHANGELOG.md') if os.path.exists(os.path.join(root, f))]
    docs = os.path.join(root, 'docs')
    if os.path.isdir(docs):
        files += sorted(os.path.join(docs, f) for f in os.listdir(docs) if f.endswith('.md'))
    problems = []
    n_links = 0
    for path in files:
        rel = os.path.relpath(path, root)
        for n, line in text_lines(path):
            for m in LINK.finditer(line):
                target = m.group(1)
                if re.match(r'^[a-z][a-z0-9+.-]*:', target, re.I):
                    continue    # a URL
                n_links += 1
                where = f'{rel}:{n}: {target}'
                file_part, _, frag = target.partition('#')
                dest = os.path.realpath(os.path.join(os.path.dirname(path), file_part)) if file_part else path
                if dest != root and not dest.startswith(root + os.sep):
                    problems.append(f'{where}: leaves the repository')
                    continue
                if not os.path.exists(dest):
                    problems.append(f'{where}: no such file')
                    continue
                if frag:
                    if not dest.endswith('.md') or os.path.isdir(dest):
                        problems.append(f'{where}: an anchor on something that is not a Markdown file')
                    elif frag not in anchors(dest):
                        problems.append(f'{where}: no heading makes the anchor #{frag}')
    return files, n_links, problems


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..')
    files, n_links, problems = check(root)
    for p in problems:
        print(p)
    print(f'check_doc_links: {len(files)} files, {n_links} relative links, {len(problems)} broken')
    return 1 if problems or not files else 0


if __name__ == '__main__':
    sys.exit(main())
