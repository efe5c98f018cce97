"""Build evidence: what ptxas says each kernel uses (registers, spills, stack, shared memory, barriers)."""

from __future__ import annotations

import re

from pydantic import BaseModel

from .kernels import demangle_all, short_name

RESOURCE_FIELDS = ("registers", "spill_stores", "spill_loads", "stack", "smem", "barriers")
# These follow from the source alone; the rest may move with an nvcc upgrade.
SOURCE_FIXED = ("smem", "barriers")

_ENTRY = re.compile(r"Compiling entry function '(?P<name>[^']+)' for '(?P<arch>[^']+)'")
_FRAME = re.compile(r"(?P<stack>\d+) bytes stack frame, (?P<stores>\d+) bytes spill stores, "
                    r"(?P<loads>\d+) bytes spill loads")
_USED = re.compile(r"Used (?P<regs>\d+) registers")
_BARRIERS = re.compile(r"used (?P<bars>\d+) barriers")
_SMEM = re.compile(r"(?P<smem>\d+) bytes smem")


class KernelResources(BaseModel):
    kernel: str          # demangled short name: transposeTiledStatic
    mangled: str
    registers: int = 0
    spill_stores: int = 0
    spill_loads: int = 0
    stack: int = 0
    smem: int = 0
    barriers: int = 0


# The figures ptxas reports for a kernel, in the order `build -v` shows them.
RESOURCE_FIELDS = ("registers", "spill_stores", "spill_loads", "stack", "smem", "barriers")


class BuildEvidence(BaseModel):
    """ptxas' report for one lesson built for one architecture."""

    lesson: str
    arch: str
    nvcc_version: str | None
    flags: list[str]
    kernels: dict[str, KernelResources]


def parse_resources(ptxas_output: str) -> dict[str, KernelResources]:
    """Per kernel resources from nvcc --resource-usage output (stderr)."""
    found: dict[str, dict] = {}
    current: str | None = None
    for line in ptxas_output.splitlines():
        m = _ENTRY.search(line)
        if m:
            current = m.group("name")
            found[current] = {"mangled": current}
            continue
        if current is None:
            continue
        m = _FRAME.search(line)
        if m:
            found[current].update(stack=int(m.group("stack")), spill_stores=int(m.group("stores")),
                                  spill_loads=int(m.group("loads")))
        m = _USED.search(line)
        if m:
            found[current]["registers"] = int(m.group("regs"))
            bars = _BARRIERS.search(line)
            found[current]["barriers"] = int(bars.group("bars")) if bars else 0
            smem = _SMEM.search(line)
            found[current]["smem"] = int(smem.group("smem")) if smem else 0
    names = {mangled: short_name(full) for mangled, full in demangle_all(list(found)).items()}
    return {names[m]: KernelResources(kernel=names[m], **values) for m, values in found.items()}


def compare_resources(old: BuildEvidence, new: BuildEvidence) -> tuple[list[str], list[str]]:
    """(failures, notes): every resource that moved, naming the kernel and the numbers.

    With the same nvcc every move fails; across nvcc versions only shared
    memory and barriers (fixed by the source) fail and the rest are notes.
    """
    failures: list[str] = []
    notes: list[str] = []
    same_nvcc = old.nvcc_version == new.nvcc_version
    for name in sorted(set(old.kernels) | set(new.kernels)):
        before, after = old.kernels.get(name), new.kernels.get(name)
        if before is None or after is None:
            failures.append(f"{new.arch}: kernel {name} is {'new' if before is None else 'gone'} "
                            f"since the build evidence")
            continue
        for field in RESOURCE_FIELDS:
            a, b = getattr(before, field), getattr(after, field)
            if a != b:
                text = f"{new.arch}: {name}: {field.replace('_', ' ')} {a} -> {b}"
                (failures if same_nvcc or field in SOURCE_FIXED else notes).append(text)
    return failures, notes
