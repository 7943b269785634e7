"""Which kind of proposal found a study's best plan, and its near-best ones (issue 24).

    python benchmarks/search_efficiency.py live studies/decoder_stack.py --layers 24 --trials 30 --workdir W
    python benchmarks/search_origins.py sqlite:///W/live.db

Reads a finished study (any storage ``sktune run`` wrote; the newest study unless
``--study`` names one) and prints, per origin (starting point, refinement, culprit seed,
local search, TPE, random start-up), its trials, its exact trials, how many of those are
within 2 % of the smallest exact ratio the search measured, and whether the study's named
best (the finalists' verdict) came from it. Figures come from
the study's own measurements; nothing is asserted.
"""

from __future__ import annotations

from typing import Annotated

import typer

from sktune.benchlib.origins import origin_table, sampled
from sktune.benchlib.script import run
from sktune.errors import SktuneError
from sktune.tuning.storage import existing_study_names, load_existing_study, mask_url

app = typer.Typer(add_completion=False)


@app.command()
def main(storage: str, study: Annotated[str | None, typer.Option(help="Study name (default: the newest).")] = None,
         tolerance: float = 0.02) -> None:
    """Print the origin table of one study."""
    names = existing_study_names(storage)  # reads only: a mistyped path is not created
    if not names:
        raise SktuneError(f"no study in {mask_url(storage)}")
    name = study or names[-1]
    loaded = load_existing_study(name, storage)
    rows = origin_table(loaded, tolerance)
    print(f"{name}: {len(loaded.trials)} trials")
    print(f"| origin | trials | exact | within {tolerance:.0%} of the best measured | named best |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(f"| {r.origin} | {r.trials} | {r.exact} | {r.within} | {'yes' if r.best else ''} |")
    mine = [r for r in rows if sampled(r.origin)]
    print(f"sampled (local, TPE, random; with their refinements): {sum(r.trials for r in mine)} trials, "
          f"{sum(r.within for r in mine)} within {tolerance:.0%} of the best measured, "
          f"named best among them: {any(r.best for r in mine)}")


if __name__ == "__main__":
    run(app)
