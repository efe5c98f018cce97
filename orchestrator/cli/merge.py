"""`report merge`: the reports of every shard of one run, of one GPU model or several, into one report."""

from __future__ import annotations

from ..errors import ReportError, UsageError
from ..judge.results import LessonResult, Status, status_of
from ..cuda.toolchain import Toolchain
from .report import ModelRun, VerifyReport, missing_shards


def status_problem(result: LessonResult) -> str:
    """Why a result's status does not follow from what it holds (results.status_of, and its failed gates, fields,
    passes and run); empty when it does. A lesson stopped before it was judged (UNSUPPORTED, SKIPPED) holds no
    run and nothing that failed; any failure may be of another kind (a crash of coursectl is a CRASH)."""
    failed = [f"gate {c.id!r} failed" for c in result.claims if c.kind == "gate" and not c.held]
    failed += [f"field {f.path} is {f.status.value}" for f in result.fields if f.status.is_failure]
    failed += [f"{p.tool}: {p.problems[0]}".splitlines()[0] for p in result.sanitizers if p.problems]
    if result.run is not None and (result.run.exit_status or result.run.signal or result.run.timed_out):
        failed.append("its run did not exit 0")
    derived = status_of(result, compared=not result.recorded)
    if failed and not derived.is_failure:
        derived = Status.FAIL
    claimed = result.status
    if claimed in (Status.UNSUPPORTED, Status.SKIPPED):
        ok = not failed and result.run is None
    elif claimed.is_failure:
        ok = derived.is_failure
    else:
        ok = claimed is derived
    if ok:
        return ""
    return f"what it holds says {derived.value}" + (f" ({failed[0]})" if failed else "")


def model_of(report: VerifyReport) -> str:
    """The GPU model a report ran on: its toolchain's GPUs' slug (`a+b` for a machine of two models), else its
    results' GPUs'; `offline` for verify --offline, `no GPU` for a report that names none."""
    slugs = sorted({g.slug for g in report.toolchain.gpus}) if report.toolchain else []
    if not slugs and not report.offline:
        slugs = sorted({r.gpu for r in report.results if r.gpu})
    return "+".join(slugs) or ("offline" if report.offline else "no GPU")


def _by_model(reports: list[VerifyReport]) -> dict[str, list[tuple[list[str], Toolchain | None]]]:
    """Each GPU model's reports, as (their shards, their toolchain); a merged report gives each of its models."""
    models: dict[str, list[tuple[list[str], Toolchain | None]]] = {}
    for report in reports:
        if report.models:
            for model, run in report.models.items():
                models.setdefault(model, []).append((run.shards, run.toolchain))
        else:
            models.setdefault(model_of(report), []).append(
                (report.shards or ([report.shard] if report.shard else []), report.toolchain))
    return models


def _by_split(shard: str) -> tuple[int, int]:
    k, n = shard.split("/")
    return int(n), int(k)


def merge_reports(reports: list[VerifyReport], *, allow_partial: bool = False, strict: bool = False) -> VerifyReport:
    """Shards' reports into one: for each GPU model, every shard 1..N of its split (each model has its own N),
    all from one manifest; each lesson once per GPU.

    The reports are grouped by the GPU model they ran on (model_of). A model's missing shards are refused unless
    allow_partial, which marks the result partial: a UsageError (exit 2) naming the model and the shards it
    lacks; reports that cannot make one honest report are a ReportError (exit 1). The merged report keeps each
    model's shards and toolchain (`models`), and a toolchain of its own only when there is one model.
    """
    digests = {r.manifest_sha256 for r in reports}
    if len(digests) > 1:
        raise ReportError(f"the reports come from {len(digests)} different manifests (lessons.yaml changed "
                          "between the shards' runs); merge the shards of one run")
    models = _by_model(reports)
    missing = []
    for model, runs in sorted(models.items()):
        shards = [s for run_shards, _ in runs for s in run_shards]
        if not shards:
            continue
        if len({s.split("/")[1] for s in shards}) > 1 or not all(run_shards for run_shards, _ in runs):
            raise ReportError(f"{model}: the reports are shards of different splits "
                              f"({', '.join(sorted(set(shards), key=_by_split))})")
        if lacking := missing_shards(shards):
            missing.append(f"{model}: {lacking}")
    if missing and not allow_partial:   # the command line lacks a file it needs: a usage error (exit 2)
        raise UsageError(f"{'; '.join(missing)}; merge every shard, or pass --allow-partial")
    seen: dict[tuple[str, str | None], int] = {}
    results: list[LessonResult] = []
    for index, report in enumerate(reports):
        for result in report.results:
            key = (result.lesson, result.gpu)
            if key in seen:
                raise ReportError(f"lesson {result.lesson!r} on {result.gpu or 'no GPU'} appears in "
                                  f"reports {seen[key] + 1} and {index + 1}")
            seen[key] = index
            problem = status_problem(result)
            if problem:
                raise ReportError(f"report {index + 1}: lesson {result.lesson!r} on {result.gpu or 'no GPU'} says "
                                  f"{result.status.value}, but {problem}; merge the reports as verify wrote them")
            results.append(result)
    merged = {model: ModelRun(shards=sorted({s for run_shards, _ in runs for s in run_shards}, key=_by_split),
                              toolchain=next((tc for _, tc in runs if tc), None))
              for model, runs in sorted(models.items())}
    return VerifyReport(command="report merge", date=max((r.date for r in reports), default=""),
                        offline=all(r.offline for r in reports), strict=strict,
                        manifest_sha256=digests.pop() if digests else None,
                        shards=sorted({s for run in merged.values() for s in run.shards}, key=_by_split),
                        partial=bool(missing), toolchain=merged[next(iter(merged))].toolchain
                        if len(merged) == 1 else None, models=merged, results=results)
