"""The Build/Run/Verified lines render writes at the top of a lesson's source.

They go into the source's leading comment, after a licence or copyright
notice (or an SPDX line) when it starts with one, never above it;
evidence.HEADER_LINE says which lines they are, and lesson_digest leaves them
out of the source's hash wherever they sit.
"""

from __future__ import annotations

import re
import shlex
from typing import NamedTuple

from ..cuda.build import display_command
from ..files import TEXT_LIMIT, decode_text, read_file, relative, source_lines
from ..judge.evidence import HEADER_LINE, EvidenceMeta, Recorded
from ..manifest.model import Lesson, Manifest
from ..words import one_line

NO_EVIDENCE_LINE = "// Verified: no evidence recorded yet."


# What marks a leading comment as the file's licence or copyright notice.
_LICENCE = re.compile(r"copyright|licen[cs]e|SPDX-License-Identifier", re.IGNORECASE)


def rewrite_header(text: str, lines: list[str]) -> str:
    """The source with the Build/Run/Verified lines of its leading comment replaced by `lines`.

    A leading licence or copyright notice (see `licence_end`) is left exactly
    as it is: the lines go after it, never above it, and lines an older
    render wrote above it move below it. After the notice, each kind stays
    where it stands; a kind the header lacks is added after the others (or,
    with none, at the end of the leading comment).

    Each of `lines` stays one line of the comment whatever it holds: a line
    break or other control character in it becomes a space, and a backslash
    that ends it (which would carry the comment on to the next line) is
    dropped, so nothing handed here can become code in the source.
    """
    lines = [comment_line(line) for line in lines]
    old = source_lines(text, keepends=True)
    newline = "\r\n" if old and old[0].endswith("\r\n") else "\n"
    start = licence_end(old)
    if start == 0:
        return _rewrite_leading_comment(old, lines, newline)
    notice = old[:start]
    if any(_header_kind(line) for line in notice):
        notice = [line for line in notice if _header_kind(line) is None]
        while notice and not notice[0].strip():   # the blank line that render put after them
            notice.pop(0)
    gap = start
    while gap < len(old) and not old[gap].strip():
        gap += 1
    if gap < len(old) and old[gap].startswith("//"):   # the lesson's own comment, after the notice
        return "".join(notice + old[start:gap]) + _rewrite_leading_comment(old[gap:], lines, newline)
    generated = [line + newline for kind in ("Build", "Run", "Verified")
                 for line in lines if _header_kind(line) == kind]
    return "".join(notice + generated + (old[start:gap] or [newline]) + old[gap:])


def comment_line(line: str) -> str:
    """`line` as one line of a `//` comment: no line break or control character, no backslash at its end."""
    return one_line(line).rstrip().rstrip("\\").rstrip()


def licence_end(lines: list[str]) -> int:
    """The number of leading lines that are the file's licence or copyright notice; 0 if it has none.

    The notice is the first `/* ... */` comment, when only blank and `//`
    lines stand before it and it names a copyright, a licence or an SPDX
    identifier (cuda-samples' style); otherwise, in the leading run of `//`
    lines, every line up to the end of the last paragraph (paragraphs are
    parted by an empty `//` line) that names one. Build/Run/Verified lines
    are never part of it.
    """
    count = len(lines)
    first = 0
    while first < count and (not lines[first].strip() or lines[first].lstrip().startswith("//")):
        first += 1
    if first < count and lines[first].lstrip().startswith("/*"):
        opened = lines[first].index("/*") + 2
        last = first if "*/" in lines[first][opened:] else \
            next((n for n in range(first + 1, count) if "*/" in lines[n]), None)
        if last is not None and _LICENCE.search("".join(lines[first:last + 1])):
            return last + 1
    run = 0
    while run < count and lines[run].startswith("//"):
        run += 1
    named = [n for n in range(run) if _header_kind(lines[n]) is None and _LICENCE.search(lines[n])]
    if not named:
        return 0
    end = named[-1] + 1
    while end < run and lines[end].strip() != "//" and _header_kind(lines[end]) is None:
        end += 1
    return end


def _rewrite_leading_comment(old: list[str], lines: list[str], newline: str) -> str:
    """rewrite_header on what follows the licence notice (or on the whole file, without one)."""
    end = 0
    while end < len(old) and old[end].startswith("//"):
        end += 1
    wanted: dict[str, list[str]] = {}
    for line in lines:
        wanted.setdefault(_header_kind(line), []).append(line + newline)
    kinds = [_header_kind(line) for line in old[:end]]
    present = [k for k in kinds if k is not None]
    if set(present) == set(wanted):
        out: list[str] = []
        done: set[str] = set()
        for line, kind in zip(old[:end], kinds):
            if kind is None:
                out.append(line)
            elif kind not in done:
                out.extend(wanted[kind])
                done.add(kind)
        return "".join(out + old[end:])
    generated = [line for kind in ("Build", "Run", "Verified") for line in wanted.get(kind, [])]
    if present:
        first = kinds.index(present[0])
        kept = [line for line, kind in zip(old[:end], kinds) if kind is None]
        return "".join(kept[:first] + generated + kept[first:] + old[end:])
    spacer = ["//" + newline] if end else []
    tail = old[end:] if end else [newline] + old
    return "".join(old[:end] + spacer + generated + tail)


def _header_kind(line: str) -> str | None:
    match = HEADER_LINE.match(line)
    return match.group(1).rstrip(":") if match else None


def without_verified(text: str) -> str:
    # The Verified lines name the evidence; leaving them out of the Compiler
    # Explorer source keeps its link unchanged when evidence is re-recorded.
    return "".join(line for line in source_lines(text, keepends=True) if _header_kind(line) != "Verified")


# -- the lines themselves ------------------------------------------------------------------------
class SourceHeader(NamedTuple):
    """What render writes at the top of a lesson's source, and the build and run commands a page shows."""

    arch: str          # of the first GPU's evidence, else the first architecture lessons.yaml names
    build: str
    run: str
    lines: list[str]   # // Build:, // Run:, then a // Verified line per GPU (or that none is recorded)


def provenance(meta: EvidenceMeta) -> str:
    """NVIDIA H200 (compute capability 9.0), driver ..., CUDA ..., nvcc ...: the GPU evidence was recorded on."""
    parts = [f"{meta.gpu_name} (compute capability {meta.compute_capability})"]
    for what, value in (("driver", meta.driver_version), ("CUDA", meta.cuda_version),
                        ("nvcc", meta.nvcc_version)):
        if value:
            parts.append(f"{what} {value}")
    return ", ".join(parts)


def source_header(manifest: Manifest, lesson: Lesson, evidence: list) -> SourceHeader:
    """The header of a lesson's source from lessons.yaml and its evidence (judge.evidence's Evidence, per GPU)."""
    arch = evidence[0].meta.arch if evidence else manifest.architectures[0]
    build = shlex.join(display_command(manifest, lesson, arch))
    run = shlex.join([f"./{lesson.binary_name}", *lesson.args])
    verified = [f"// Verified {e.meta.date[:10]} on {provenance(e.meta)}. "
                f"Transcript: {relative(e.directory / 'transcript.txt', manifest.root)}" for e in evidence]
    return SourceHeader(arch=arch, build=build, run=run,
                        lines=[f"// Build: {build}", f"// Run:   {run}", *(verified or [NO_EVIDENCE_LINE])])


def stale_source_header(manifest: Manifest, lesson: Lesson, recorded: Recorded | None = None) -> str | None:
    """Why the Build/Run/Verified lines in a lesson's source are not the ones render writes now, or None.

    A source without such lines (never rendered, or `source_header: false`) has none to be stale.
    Only those lines are computed, not the page: verify --offline asks this of every lesson, with the
    lesson's Recorded, from which its stages after this one take the same sets.
    """
    data = read_file(manifest.source_path(lesson), TEXT_LIMIT, "a lesson's source", shown=lesson.source.as_posix(),
                     root=manifest.root)
    looked_into = "" if data is None else data.decode("utf-8", errors="replace")
    if not lesson.source_header or not any(HEADER_LINE.match(line) for line in source_lines(looked_into)):
        return None
    old = decode_text(data, lesson.source.as_posix())   # read once: its lines are rewritten only as UTF-8 text
    # The lines name each GPU's evidence (its meta.json and folder): its transcript is not parsed here, as
    # judge_evidence parses it, once.
    recorded = recorded if recorded is not None else Recorded(manifest.root, lesson.id)
    sets = [item for item in map(recorded.load, recorded.slugs()) if item is not None]
    if rewrite_header(old, source_header(manifest, lesson, sets).lines) == old:
        return None
    return (f"{lesson.source.as_posix()}: its Build/Run/Verified lines are not the ones render writes from "
            f"lessons.yaml and the evidence; run `coursectl render`")
