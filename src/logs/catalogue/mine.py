#!/usr/bin/env python3
"""Mines the WARN/ERROR sites of NCCL, NVSHMEM and DeepEP from their git
histories into sites.inc, the catalogue's data (see catalogue.h).

    mine.py NCCL_GIT NVSHMEM_GIT DEEPEP_GIT NVSHMEM_ARCHIVE_GIT > src/logs/catalogue/sites.inc

Each argument is a git directory (a bare clone is enough). NVIDIA/nvshmem's
history starts at 3.3; the releases before it (3.0 to 3.2) are read from an
archive of the release tarballs (valgur/NVSHMEM-archive). Only the format
strings are taken (facts about the messages, no code); a site is one format
string with the macro that prints it, the file it is in and the first and
last mined version that has it.
"""
import re
import subprocess
import sys

# Older releases, whose wordings still fill the trackers; a wording the newer
# ones also hold keeps the newer file.
NCCL_OLD_VERSIONS = [("2.12", "v2.12.12-1"), ("2.13", "v2.13.4-1"), ("2.14", "v2.14.3-1"),
                     ("2.15", "v2.15.5-1"), ("2.16", "v2.16.5-1"), ("2.17", "v2.17.1-1")]
NCCL_VERSIONS = [("2.18", "v2.18.6-1"), ("2.19", "v2.19.4-1"), ("2.20", "v2.20.5-1"),
                 ("2.21", "v2.21.5-1"), ("2.22", "v2.22.3-1"), ("2.23", "v2.23.4-1"),
                 ("2.24", "v2.24.3-1"), ("2.25", "v2.25.1-1"), ("2.26", "v2.26.6-1"),
                 ("2.27", "v2.27.7-1"), ("2.28", "v2.28.9-1")]
NVSHMEM_VERSIONS = [("3.3", "59ec268"), ("3.4", "df28141"), ("3.5", "7dd48c9")]
# Older releases, from the archive (tags 3.0.6-4, 3.1.7-1, 3.2.5-1).
NVSHMEM_ARCHIVE_VERSIONS = [("3.0", "219ef19"), ("3.1", "65e35ce"), ("3.2", "6d8ab15")]
DEEPEP_VERSIONS = [("V1.0", "ebfe47e"), ("V1.1", "06f417d"), ("V1.2", "b306af0^"), ("V2", "dd758ca")]

# Macro -> (kind printed in sites.inc, index of the format argument).
NCCL_MACROS = {"WARN": ("nccl_warn", 0)}
NVSHMEM_MACROS = {
    "WARN": ("nvshmem_warn", 0),
    "NVSHMEMI_ERROR_PRINT": ("nvshmem_error", 0),
    "NVSHMEMI_ERROR_EXIT": ("nvshmem_error", 0),
    "NVSHMEMI_WARN_PRINT": ("nvshmem_warn_print", 0),
    "NVSHMEMI_ERROR_JMP": ("nvshmem_status", 3),
    "NVSHMEMI_NZ_ERROR_JMP": ("nvshmem_status", 3),
    "NVSHMEMI_NE_ERROR_JMP": ("nvshmem_status", 4),
    "NVSHMEMI_EQ_ERROR_JMP": ("nvshmem_error_status", 4),
    "NVSHMEMI_NULL_ERROR_JMP": ("nvshmem_null", 4),
    "NVSHMEMI_CHECK_ERROR_JMP": ("nvshmem_check", 4),
    "NVSHMEMI_NZ_EXIT": ("nvshmem_exit", 1),
    "NVSHMEMI_NZ_SYSCHECK_EXIT": ("nvshmem_exit", 1),
    "BOOTSTRAP_ERROR_PRINT": ("nvshmem_error", 0),
}
DEEPEP_MACROS = {"printf": ("deepep_print", 0), "runtime_error": ("deepep_throw", 0),
                 "EP_HOST_UNREACHABLE": ("deepep_assert", 0)}


def git(repo, *args):
    return subprocess.run(["git", "-C", repo, *args], check=True, capture_output=True,
                          text=True, errors="replace").stdout


def files(repo, rev, roots, exts):
    out = git(repo, "ls-tree", "-r", "--name-only", rev, "--", *roots).split("\n")
    return [f for f in out if f.endswith(exts) and "/test" not in f and not f.startswith("test")]


CODE = re.compile(r'"(?:[^"\\\n]|\\.)*"|\'(?:[^\'\\\n]|\\.)\'|//[^\n]*|/\*.*?\*/', re.S)


def strip_comments(text):
    """Comments become a space; string and character literals are kept."""
    return CODE.sub(lambda m: m.group(0) if m.group(0)[0] in "\"'" else " ", text)


def split_args(text, start):
    """Top-level arguments of the call whose '(' is at text[start]."""
    depth, i, args, cur = 0, start, [], []
    while i < len(text):
        c = text[i]
        if c == '"':
            j = i + 1
            while j < len(text) and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            cur.append(text[i:j + 1])
            i = j + 1
            continue
        if c == "'":
            j = i + 1
            while j < len(text) and text[j] != "'":
                j += 2 if text[j] == "\\" else 1
            cur.append(text[i:j + 1])
            i = j + 1
            continue
        if c in "([{":
            depth += 1
            if depth > 1:
                cur.append(c)
        elif c in ")]}":
            depth -= 1
            if depth == 0:
                args.append("".join(cur))
                return args
            cur.append(c)
        elif c == "," and depth == 1:
            args.append("".join(cur))
            cur = []
        else:
            cur.append(c)
        i += 1
    return None


TOKEN = re.compile(r'"((?:[^"\\]|\\.)*)"|([A-Za-z_][A-Za-z0-9_]*)|(\S)')


def format_of(arg):
    """The format string of an argument made of literals and macro names
    (a name between literals is printed as %s); None if it has no literal."""
    parts, literal = [], False
    for m in TOKEN.finditer(arg):
        if m.group(1) is not None:
            s = m.group(1)
            s = s.replace("\\n", "\x00").replace('\\"', '"').replace("\\t", " ").replace("\\\\", "\\")
            parts.append(s)
            literal = True
        elif m.group(2) is not None:
            if m.group(2) in ("PRIu64", "PRIx64", "PRId64"):
                parts.append({"PRIu64": "lu", "PRIx64": "lx", "PRId64": "ld"}[m.group(2)])
            else:
                parts.append("%s")
        else:
            return None
    # A literal continued with backslash-newline inside a macro keeps the
    # newline and the next line's indentation: collapse such runs.
    text = re.sub(r"\\?\n\s*", "", "".join(parts))
    # A message printed over several lines ("...'%s'.\nThis is usually
    # caused by...") is recognised by its first line: the others carry no
    # prefix in a log.
    text = next((t for t in text.split("\x00") if t.strip()), "").strip()
    return text if literal and text else None


def mine(repo, versions, roots, exts, macros, keep=None):
    sites = {}  # (kind, fmt) -> [first, last, file]
    call = re.compile(r"\b(" + "|".join(map(re.escape, macros)) + r")\s*\(")
    for name, rev in versions:
        for path in files(repo, rev, roots, exts):
            text = strip_comments(git(repo, "show", f"{rev}:{path}"))
            for m in call.finditer(text):
                kind, index = macros[m.group(1)]
                # The bootstrap modules print WARN() as BOOTSTRAP_ERROR_PRINT.
                if kind == "nvshmem_warn" and "/bootstrap/" in path:
                    kind = "nvshmem_error"
                if m.group(1) == "WARN" and text[max(0, m.start() - 8):m.start()].endswith("define "):
                    continue
                args = split_args(text, m.end() - 1)
                if not args or len(args) <= index:
                    continue
                fmt = format_of(args[index])
                if fmt is None or (keep and not keep(fmt)):
                    continue
                key = (kind, fmt)
                if key in sites:
                    sites[key][1] = name
                else:
                    sites[key] = [name, name, path]
    return sites


def merge_older(sites, older):
    """The older releases add their own wordings and move "first" back; a
    wording both hold keeps the file of the newer sources."""
    for key, (first, last, path) in older.items():
        if key in sites:
            sites[key][0] = first
        else:
            sites[key] = [first, last, path]
    return sites


def deepep_keep(fmt):
    low = fmt.lower()
    if "initialized with" in low:  # a banner, not a failure
        return False
    return "timeout" in low or "deepep" in low or "assert" in low or "failed" in low


def quote(s):
    s = "".join(c if " " <= c <= "~" else " " for c in s)
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def main():
    nccl, nvshmem, deepep, archive = sys.argv[1:5]
    nccl_exts = (".cc", ".h", ".cu", ".cpp")
    nccl_sites = merge_older(mine(nccl, NCCL_VERSIONS, ["src"], nccl_exts, NCCL_MACROS),
                             mine(nccl, NCCL_OLD_VERSIONS, ["src"], nccl_exts, NCCL_MACROS))
    out = [("nccl", k, v) for k, v in nccl_sites.items()]
    nvshmem_exts = (".cpp", ".cu", ".h", ".cuh", ".c")
    nvshmem_sites = merge_older(
        mine(nvshmem, NVSHMEM_VERSIONS, ["src"], nvshmem_exts, NVSHMEM_MACROS),
        mine(archive, NVSHMEM_ARCHIVE_VERSIONS, ["src"], nvshmem_exts, NVSHMEM_MACROS))
    out += [("nvshmem", k, v) for k, v in nvshmem_sites.items()]
    out += [("deepep", k, v) for k, v in mine(deepep, DEEPEP_VERSIONS, ["csrc", "deep_ep"], (".cpp", ".cu", ".cuh", ".hpp", ".h"), DEEPEP_MACROS, deepep_keep).items()]
    print("// Generated by mine.py from the sources' git histories: do not edit by hand.")
    print("// source, macro kind, first and last mined version, file, format string.")
    for source, (kind, fmt), (first, last, path) in sorted(out, key=lambda r: (r[0], r[2][2], r[1][1])):
        print(f"{{Source::{source}, Kind::{kind}, {quote(first)}, {quote(last)}, {quote(path)},\n {quote(fmt)}}},")


if __name__ == "__main__":
    main()
