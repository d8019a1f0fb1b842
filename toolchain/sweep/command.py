"""``bitforge sweep SPEC -o OUT``: parsing and printing only; the work is :func:`.driver.run_sweep`'s.

Everything that can be known before a point runs is checked first (the spec, its axes' values, the sampling, the
executor's settings, the output folder), so a bad spec exits 2 without starting a worker.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from ..errors import BitforgeError

__all__ = ["add_commands"]


def add_commands(sub, fmt) -> None:
    from ..cli_types import positive_float, positive_int
    from ..console import examples

    p = sub.add_parser(
        "sweep", formatter_class=fmt, help="explore a design space: points in parallel, cached, Pareto report",
        description="Run every point of a sweep spec (a model, recipe, learner task or stream; the axes: formats, "
                    "reuse, KAN grid size and order, learning-rate shift, target; the metrics; how far each point "
                    "goes: golden, sim, synth, pnr) on a process pool or a Ray cluster. Each point runs the same "
                    "library functions as bitforge compile / learn, in OUT/points/<key>/, keyed by the content "
                    "of everything it depends on: a rerun, an extended sweep or an interrupted one computes only "
                    "the points it has no result for. A point that does not fit, misses timing or fails is a row "
                    "with its reason. With stage pnr, points that synthesis shows cannot fit or are dominated skip "
                    "place and route (--no-early-stop runs them all). OUT gets sweep.json (every row), pareto.png "
                    "and report.html (one offline page: sortable table, fronts, best point per constraint). "
                    "Spec format: docs/sweep.md.",
        epilog=examples("""
            bitforge sweep examples/sweep-first.yml -o out/sweep-first        # a few minutes on 2 cores
            bitforge sweep examples/sweep-kan.yml -o out/sweep-kan --workers 2
            bitforge sweep examples/sweep-jet-mlp.yml -o out/sweep-jet --ray auto   # an existing Ray cluster
            bitforge sweep examples/sweep-kan.yml -o out/sweep-kan --dry-run  # list the points, run nothing
            bitforge sweep examples/sweep-llm.yml -o out/sweep-llm            # joint bit-width/rank search
            xdg-open out/sweep-kan/report.html
        """))
    p.add_argument("spec", metavar="SPEC", help="the sweep spec (.yml, .yaml or .json)")
    p.add_argument("-o", "--output", required=True, metavar="OUT",
                   help="output folder; an existing sweep folder is resumed and extended, never wiped")
    p.add_argument("--workers", type=positive_int, default=None, metavar="N",
                   help="local worker processes (default: the machine's cores)")
    p.add_argument("--ray", default=None, metavar="ADDRESS",
                   help="run the points on a Ray cluster: its address (host:port or ray://...) or 'auto' "
                        "(needs pip install 'bitforge[ray]')")
    p.add_argument("--mem-gb", type=positive_float, default=None, metavar="G",
                   help="per-point memory guard of the local pool: a point using more fails with that reason "
                        "(default: the machine's memory divided by the workers)")
    p.add_argument("--no-early-stop", action="store_true",
                   help="place and route every point, even those synthesis shows are dominated")
    p.add_argument("--retry-failed", action="store_true",
                   help="run again the points whose earlier run failed (tool errors); default: keep their rows")
    p.add_argument("--dry-run", action="store_true", help="check the spec, print the points, run nothing")
    p.add_argument("--force", action="store_true",
                   help="write into OUT even if it is a folder bitforge did not write (its files are kept)")

    def cmd(args: argparse.Namespace) -> int:
        from ..console import note, result
        from .spec import load_spec
        from .sampling import sample

        spec = load_spec(Path(args.spec))
        points = sample(spec)
        if args.dry_run:
            _print_points(spec, points)
            return 0
        if args.ray is not None and args.workers is not None:
            raise BitforgeError("--workers sizes the local pool; a Ray cluster schedules by its own CPUs: give one of "
                                "--workers and --ray")
        from .driver import run_sweep
        from .executors import make_executor

        executor = make_executor(args.workers, args.ray, args.mem_gb)
        try:
            if spec.kind == "llm":
                note(f"sweep {spec.name}: {len(points)} search(es) (the axes' combinations): per-layer proxies, an "
                     f"allocation per budget, perplexity of the survivors and the uniform configurations; on "
                     f"{executor.name}")
            else:
                note(f"sweep {spec.name}: {len(points)} points ({spec.kind}, up to {spec.stage}) on {executor.name}")
            res = run_sweep(spec, Path(args.output), executor, force=args.force, early_stop=not args.no_early_stop,
                            retry_failed=args.retry_failed, progress=True, points=points)
        finally:
            executor.close()
        _print_summary(spec, res.rows, Path(args.output))
        counts = ", ".join(f"{v} {k}" for k, v in res.counts.items() if v and k not in ("points", "done"))
        result(f"{len(res.rows)} points ({counts}) in {res.seconds:.1f} s; wrote {args.output}/ (report.html, "
               "pareto.png, sweep.json, points/)")
        return 0

    p.set_defaults(func=cmd)


def _print_points(spec, points) -> None:
    from rich.table import Table

    from ..console import table_console

    t = Table(title=f"{spec.name}: {len(points)} points ({spec.sampling.method}), up to {spec.stage}")
    t.add_column("#", justify="right")
    for a in spec.axes:
        t.add_column(a.name)
    for pt in points:
        t.add_row(str(pt.index), *(str(pt.params[a.name]) for a in spec.axes))
    table_console().print(t)


def _print_summary(spec, rows, out: Path) -> None:
    """The best point of each constraint and the failed points' reasons (the whole table is in report.html)."""
    from ..console import result, warn
    from .pareto import best

    for c in spec.constraints:
        row = best(rows, c)
        if row is None:
            result(f"{c.label}: no point qualifies")
        else:
            value = row.metrics.get(c.best)
            params = ", ".join(f"{k}={v}" for k, v in row.params.items())
            result(f"{c.label}: {params} ({c.best} = {value}; {out / row.folder})")
    for row in rows:
        if row.status == "failed":
            warn(f"point {row.index} ({', '.join(f'{k}={v}' for k, v in row.params.items())}) failed: {row.reason}")
