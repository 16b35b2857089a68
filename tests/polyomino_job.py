"""Free polyominoes of n cells by overlapping seeds, as a researcher would first write it: one shard
per free polyomino of ``seed`` cells, grown a cell at a time to n cells, every form it reaches
emitted in canonical form.  A polyomino of n cells holds several seeds, so the shards overlap and
the merge must deduplicate (counts: OEIS A000105)."""

from __future__ import annotations

from batchenum.pipeline.job import Column, Job, Param, PlanContext, Shard, ShardResult, TableSpec

# OEIS A000105: free polyominoes with n cells, n = 0..14
FREE = [1, 1, 1, 2, 5, 12, 35, 108, 369, 1285, 4655, 17073, 63600, 238591, 901971]

_SYMMETRIES = (
    lambda x, y: (x, y),
    lambda x, y: (-x, y),
    lambda x, y: (x, -y),
    lambda x, y: (-x, -y),
    lambda x, y: (y, x),
    lambda x, y: (-y, x),
    lambda x, y: (y, -x),
    lambda x, y: (-y, -x),
)


def canonical(cells: frozenset) -> tuple:
    """The smallest of the 8 images of ``cells`` (rotations and reflections), each moved to touch
    the axes and sorted: one form per free polyomino."""
    best = None
    for move in _SYMMETRIES:
        image = [move(x, y) for x, y in cells]
        low_x, low_y = min(x for x, _ in image), min(y for _, y in image)
        form = tuple(sorted((x - low_x, y - low_y) for x, y in image))
        if best is None or form < best:
            best = form
    return best  # type: ignore[return-value]


def grown(forms: set) -> set:
    """Every form reached from one of ``forms`` by adding one cell beside it."""
    found = set()
    for form in forms:
        cells = frozenset(form)
        for x, y in form:
            for cell in ((x + 1, y), (x - 1, y), (x, y + 1), (x, y - 1)):
                if cell not in cells:
                    found.add(canonical(cells | {cell}))
    return found


def free_polyominoes(n: int) -> set:
    forms = {((0, 0),)}
    for _ in range(n - 1):
        forms = grown(forms)
    return forms


def key_text(form: tuple) -> str:
    return ";".join(f"{x},{y}" for x, y in form)


class Polyominoes(Job):
    """Free polyominoes of ``n`` cells, one shard per seed of ``seed`` cells (overlapping shards)."""

    name = "polyominoes"
    version = "1"
    n = Param(int, default=10, low=1, high=14, help="cells")
    seed = Param(int, default=4, low=1, high=8, help="cells of a seed: one shard per free polyomino of this size")
    tables = (
        TableSpec(
            "forms",
            (Column("key", "string", distinct=True), Column("seed", "string")),
            key=("key",),
            sort=("key",),
        ),
    )

    def plan(self, context: PlanContext) -> list[Shard]:
        seeds = sorted(free_polyominoes(min(self.seed, self.n)))
        return [Shard(f"seed{k:04d}", {"seed": key_text(form)}) for k, form in enumerate(seeds)]

    def run_shard(self, shard: Shard, context=None) -> ShardResult:
        seed = shard.spec["seed"]
        forms = {tuple(tuple(int(v) for v in cell.split(",")) for cell in seed.split(";"))}
        for _ in range(self.n - min(self.seed, self.n)):
            forms = grown(forms)
        keys = sorted(key_text(form) for form in forms)
        return ShardResult({"forms": {"key": keys, "seed": [seed] * len(keys)}}, {"emitted": len(keys)})

    def summary(self, tables: dict, totals: dict) -> str:
        return f"polyominoes: {totals.get('emitted', 0)} rows emitted, {len(tables['forms'])} distinct free forms"
