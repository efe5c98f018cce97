"""A lesson's program of several translation units (`sources:`): the commands that build it, and what a
failed link says of the files it compiled. cuda/build.py runs them."""

from __future__ import annotations

from pathlib import Path

from ..manifest.model import Lesson


def unit_commands(nvcc: str, flags: list[str], units: list[Path],
                  output: Path) -> tuple[list[tuple[list[str], Path]], list[str]]:
    """A program of several files as nvcc builds it: each translation unit compiled on its own (`-c`, with its
    own dependency list, `-MD -MF`), then the objects linked, with the same flags, so that `-rdc=true` among
    them gives relocatable device code and a device link, and none a whole-program build of each unit.
    ([(compile command, its dependency list)], the link command)."""
    compiles, objects = [], []
    for index, unit in enumerate(units):
        obj = output.parent / f"{output.name}.{index}.{unit.name}.o"
        objects.append(str(obj))
        compiles.append(([nvcc, *flags, "--resource-usage", "-MD", "-MF", f"{obj}.d", "-c",
                          "-o", str(obj), str(unit)], Path(f"{obj}.d")))
    return compiles, [nvcc, *flags, "-o", str(output), *objects]


def link_failure(diagnostics: str, lesson: Lesson) -> str | None:
    """The line a failed build's error ends with when the link found no definition of a function: which files
    the lesson compiled, and that `sources:` takes several; None for any other failure."""
    # ld's words for a function with no definition: a host one, and a kernel (a hidden symbol, from nvcc's stub)
    if not any(words in diagnostics for words in ("undefined reference", "isn't defined", "final link failed")):
        return None
    named = ", ".join(unit.as_posix() for unit in lesson.source_files)
    return (f"the link found no definition of a function: lesson {lesson.id!r} compiled {named} only; a "
            f"program of several files lists each .cu, .cpp or .c in 'sources:' (sources: [kernel.cu, main.cu])")
