#!/usr/bin/env python3
"""Checks that no function in the given C++ sources is longer than a limit (issue 24: the
code generator's templates are built from parts; docs/codegen.md, "Templates from parts").

A function is counted from the first line of its signature to its closing brace, template
text inside raw strings included; comments, string and character literals are blanked
first so that their braces do not count. Namespace-scope constants (a template's text) are
not functions.

  check_function_length.py [--limit N] FILE_OR_DIR...
Exit 0 when every function is within the limit, 1 with one line per longer function
(file:line, its length, its signature), 2 on bad input.
"""
import argparse
import os
import re
import sys

SOURCE = (".cpp", ".cc", ".h")


def blank(text):
    """The text with comments, raw strings, strings and chars replaced by spaces (newlines kept)."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == "R" and text.startswith('R"', i) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.match(r'R"([^(\s]*)\(', text[i:])
            if not m:
                out.append(c)
                i += 1
                continue
            end = ")" + m.group(1) + '"'
            j = text.find(end, i + m.end())
            j = n if j < 0 else j + len(end)
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(n, j + 1)
            out.append(" " * (j - i))
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def functions(text):
    """(first line, last line, signature) of every function body at namespace or class scope."""
    code = blank(text)
    stack = []  # scope kinds: ns, class, fn, other
    head_start = 0
    found = []
    line = 1
    fn_start = {}
    for i, c in enumerate(code):
        if c == "\n":
            line += 1
        if c in ";{}" and (not stack or stack[-1] in ("ns", "class")):
            head = code[head_start:i]
            if c == "{":
                kind = "other"
                if re.search(r"\bnamespace\b", head) or re.search(r'\bextern\s*$', head):
                    kind = "ns"
                elif re.search(r"\b(class|struct|union)\b", head) and "(" not in head:
                    kind = "class"
                elif ")" in head and not re.search(r"=\s*$", head):
                    kind = "fn"
                    first = text.count("\n", 0, head_start + len(head) - len(head.lstrip())) + 1
                    fn_start[len(stack)] = (first, " ".join(head.split())[:100])
                stack.append(kind)
            elif c == "}" and stack:
                stack.pop()
            head_start = i + 1
            continue
        if c == "{":
            stack.append("other")
        elif c == "}" and stack:
            kind = stack.pop()
            if kind == "fn" or (stack and False):
                pass
            if not stack or stack[-1] in ("ns", "class"):
                depth = len(stack)
                if depth in fn_start and kind == "fn":
                    first, sig = fn_start.pop(depth)
                    found.append((first, line, sig))
                head_start = i + 1
    return found


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--limit", type=int, default=120)
    p.add_argument("paths", nargs="+")
    a = p.parse_args()
    files = []
    for path in a.paths:
        if os.path.isdir(path):
            for root, _, names in os.walk(path):
                files += [os.path.join(root, f) for f in sorted(names) if f.endswith(SOURCE)]
        elif os.path.isfile(path):
            files.append(path)
        else:
            print(f"error: no such file or folder: {path}", file=sys.stderr)
            return 2
    long_ones = []
    for f in sorted(files):
        with open(f, encoding="utf-8") as fh:
            text = fh.read()
        for first, last, sig in functions(text):
            if last - first + 1 > a.limit:
                long_ones.append(f"{f}:{first}: {last - first + 1} lines (limit {a.limit}): {sig}")
    for l in long_ones:
        print(l)
    print(f"{len(files)} files, {len(long_ones)} function(s) over {a.limit} lines")
    return 1 if long_ones else 0


if __name__ == "__main__":
    sys.exit(main())
