#!/usr/bin/env python3
"""Line coverage of the stages' kernel files on the CPU backend, from gcov.

    python3 tests/coverage_report.py BUILD_DIR SOURCE_DIR

Run by the `coverage` target of a build configured with -DFA_COVERAGE=ON (preset
`coverage`), after its tests: `cmake --workflow --preset coverage` does all of it.

Reads every .gcda file under BUILD_DIR with `gcov --json-format --stdout`, keeps the lines
of the kernel files (stages/*/*.cu and *.cuh, common/*.cuh; not the exercises), merges
them over translation units and template instantiations (a line is reached when any
instantiation ran it), and prints, per file, the lines with code and those reached, then
every line no test reaches with its text. The same report is written to
BUILD_DIR/coverage/kernels.txt. Lines inside templates that no configuration instantiates
produce no code and are not counted: every shipped configuration is instantiated (and
tested) by the stages' variants() lists.
"""
import json
import os
import re
import subprocess
import sys
from collections import defaultdict


def kernel_file(path, source_dir):
    rel = os.path.relpath(path, source_dir)
    if rel.startswith(".."):
        return None
    if re.fullmatch(r"stages/[^/]+/[^/]+\.(cu|cuh)", rel) or re.fullmatch(r"common/[^/]+\.cuh", rel):
        return rel
    return None


def ranges(numbers):
    out, start, prev = [], None, None
    for n in numbers:
        if start is None:
            start = prev = n
        elif n == prev + 1:
            prev = n
        else:
            out.append((start, prev))
            start = prev = n
    if start is not None:
        out.append((start, prev))
    return out


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    build_dir, source_dir = (os.path.abspath(a) for a in sys.argv[1:])
    gcdas = []
    for root, _, files in os.walk(build_dir):
        gcdas += [os.path.join(root, f) for f in files if f.endswith(".gcda")]
    if not gcdas:
        sys.exit("coverage: no .gcda files under %s: configure with -DFA_COVERAGE=ON and run the tests first"
                 % build_dir)
    reached = defaultdict(dict)  # file -> line -> count (max over units and instantiations)
    for gcda in sorted(gcdas):
        run = subprocess.run(["gcov", "--json-format", "--stdout", os.path.basename(gcda)],
                             cwd=os.path.dirname(gcda), capture_output=True, text=True)
        if run.returncode != 0:
            sys.exit("coverage: gcov failed on %s:\n%s" % (gcda, run.stderr))
        for doc in run.stdout.splitlines():
            if not doc.strip():
                continue
            for f in json.loads(doc)["files"]:
                path = f["file"] if os.path.isabs(f["file"]) else os.path.join(os.path.dirname(gcda), f["file"])
                rel = kernel_file(os.path.normpath(path), source_dir)
                if not rel:
                    continue
                lines = reached[rel]
                for line in f["lines"]:
                    n = line["line_number"]
                    lines[n] = max(lines.get(n, 0), line["count"])
    if not reached:
        sys.exit("coverage: the .gcda files cover no kernel file of %s" % source_dir)

    report = ["Line coverage of the kernel files on the CPU backend (gcov, over this build's tests)", ""]
    width = max(len(f) for f in reached)
    total = hit = 0
    missing = []
    for rel in sorted(reached):
        lines = reached[rel]
        n, h = len(lines), sum(1 for c in lines.values() if c > 0)
        total, hit = total + n, hit + h
        report.append("%-*s %5d of %5d lines  %5.1f%%" % (width, rel, h, n, 100.0 * h / n))
        unreached = sorted(line for line, c in lines.items() if c == 0)
        if unreached:
            with open(os.path.join(source_dir, rel), encoding="utf-8") as src:
                text = src.read().splitlines()
            missing.append((rel, unreached, text))
    report.append("%-*s %5d of %5d lines  %5.1f%%" % (width, "all kernel files", hit, total, 100.0 * hit / total))
    report.append("")
    if missing:
        report.append("Lines no test reaches:")
        for rel, unreached, text in missing:
            for lo, hi in ranges(unreached):
                for n in range(lo, hi + 1):
                    body = text[n - 1].strip() if n - 1 < len(text) else ""
                    report.append("  %s:%d  %s" % (rel, n, body[:100]))
    else:
        report.append("Every line of the kernel files is reached by a test.")
    out_dir = os.path.join(build_dir, "coverage")
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "kernels.txt"), "w", encoding="utf-8") as out:
        out.write("\n".join(report) + "\n")
    print("\n".join(report))
    print("\n(written to %s)" % os.path.join(out_dir, "kernels.txt"))


if __name__ == "__main__":
    main()
