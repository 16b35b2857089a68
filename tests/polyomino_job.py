"""Free polyominoes of n cells by overlapping seeds, as a researcher would first write it: one shard
per free polyomino of ``seed`` cells, grown a cell at a time to n cells, every form it reaches
emitted in canonical form.  A polyomino of n cells holds several seeds, so the shards overlap and
the merge must deduplicate (counts: OEIS A000105).

The growth runs in a numba kernel (``grown_codes``): a form is the codes ``16 * x + y`` of its
cells, sorted, the smallest of its 8 images; one step from a set of forms makes every child,
canonical, then keeps one of each.  It emits the very rows of the plain growth (``grown``, kept as
the oracle): ``tests/test_table_merge.py`` compares them.  At n = 14 the plain growth took about an
hour; docs/benchmarks.md has the kernel's figures."""

from __future__ import annotations

import numpy as np
from numba import njit

from batchenum.pipeline.job import Column, Job, Param, PlanContext, Shard, ShardResult, TableSpec

# OEIS A000105: free polyominoes with n cells, n = 0..16
FREE = [1, 1, 1, 2, 5, 12, 35, 108, 369, 1285, 4655, 17073, 63600, 238591, 901971, 3426576, 13079255]
MOST_CELLS = 16  # a canonical form's coordinates are below 16, so a cell's code 16 * x + y is one byte

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


def form_of(text: str) -> tuple:
    """The form a ``key_text`` names."""
    return tuple(tuple(int(v) for v in cell.split(",")) for cell in text.split(";"))


# ------------------------------------------------------------------------- the compiled growth


def codes_of(form: tuple) -> np.ndarray:
    """A canonical form (sorted cells) as its cells' codes ``16 * x + y``, in the same order."""
    return np.array([16 * x + y for x, y in form], dtype=np.uint8)


_CELL_TEXT = [f"{code >> 4},{code & 15}" for code in range(256)]


def key_texts(codes: np.ndarray) -> list[str]:
    """``key_text`` of each row of ``codes`` (forms, one per row)."""
    return [";".join([_CELL_TEXT[code] for code in row]) for row in codes.tolist()]


def grown_codes(codes: np.ndarray) -> np.ndarray:
    """``grown`` on codes: ``codes`` (forms, cells) uint8, one canonical form per row; returns the
    canonical forms one cell larger reached from them, each once, in ascending order."""
    if codes.shape[1] >= MOST_CELLS:
        raise ValueError(f"forms of {codes.shape[1] + 1} cells do not fit a byte per cell: at most {MOST_CELLS} cells")
    children = _children(codes)
    if not len(children):
        return children
    high, low = _packed(children)
    order = np.lexsort((low, high))  # by high, then low: the codes' order
    high, low = high[order], low[order]
    first = np.ones(len(order), dtype=bool)
    first[1:] = (high[1:] != high[:-1]) | (low[1:] != low[:-1])
    return children[order[first]]


@njit(cache=True)
def _packed(codes):
    """Each row of ``codes`` (forms, cells <= 16) uint8 as two uint64, its first 8 codes in
    ``high`` and the rest in ``low``, the first code in the top byte: so the pairs compare as the
    rows do."""
    count, cells = codes.shape
    high = np.zeros(count, np.uint64)
    low = np.zeros(count, np.uint64)
    for f in range(count):
        for i in range(8):
            high[f] = (high[f] << np.uint64(8)) | np.uint64(codes[f, i] if i < cells else 0)
            low[f] = (low[f] << np.uint64(8)) | np.uint64(codes[f, i + 8] if i + 8 < cells else 0)
    return high, low


@njit(cache=True)
def _children(codes):
    """Every form one cell larger than a row of ``codes`` (forms, m) uint8, canonical, a row
    per (form, free neighbour cell): (children, m + 1) uint8, duplicates kept."""
    count, m = codes.shape
    side = MOST_CELLS + 2  # coordinates -1 .. 16, shifted by one
    taken = np.zeros((side, side), np.bool_)
    out = np.empty((count * (2 * m + 2), m + 1), np.uint8)  # a form of m cells has at most 2m + 2 neighbours
    xs = np.empty(m + 1, np.int64)
    ys = np.empty(m + 1, np.int64)
    scratch = np.empty((3, m + 1), np.int64)
    dx = np.array([1, -1, 0, 0])
    dy = np.array([0, 0, 1, -1])
    made = 0
    for f in range(count):
        for i in range(m):
            xs[i], ys[i] = codes[f, i] >> 4, codes[f, i] & 15
            taken[xs[i] + 1, ys[i] + 1] = True
        for i in range(m):
            for d in range(4):
                x, y = xs[i] + dx[d], ys[i] + dy[d]
                if taken[x + 1, y + 1]:
                    continue
                taken[x + 1, y + 1] = True  # a neighbour of two cells: one child
                xs[m], ys[m] = x, y
                _canonical(xs, ys, out[made], scratch)
                made += 1
        for i in range(m):  # the form's cells and the neighbours tried: cleared for the next form
            for d in range(5):
                x, y = xs[i] + (dx[d] if d < 4 else 0), ys[i] + (dy[d] if d < 4 else 0)
                taken[x + 1, y + 1] = False
    return out[:made]


@njit(cache=True)
def _canonical(xs, ys, out, scratch):
    """The smallest of the 8 images of the cells (``xs``, ``ys``: int64, one per cell), each moved
    to touch the axes, as sorted codes into ``out`` (uint8, one per cell); ``scratch``: (3, cells)
    int64 for the image."""
    cells = len(xs)
    image_x, image_y, image = scratch[0], scratch[1], scratch[2]
    for symmetry in range(8):  # x and y swapped or not, then x negated or not, then y
        low_x, low_y = 1 << 30, 1 << 30
        for i in range(cells):
            x, y = (ys[i], xs[i]) if symmetry & 4 else (xs[i], ys[i])
            image_x[i] = -x if symmetry & 1 else x
            image_y[i] = -y if symmetry & 2 else y
            low_x, low_y = min(low_x, image_x[i]), min(low_y, image_y[i])
        for i in range(cells):  # insertion sort: a dozen codes, mostly in order already
            code, j = 16 * (image_x[i] - low_x) + image_y[i] - low_y, i
            while j > 0 and image[j - 1] > code:
                image[j] = image[j - 1]
                j -= 1
            image[j] = code
        if symmetry == 0 or _before(image, out):
            for i in range(cells):
                out[i] = image[i]


@njit(cache=True)
def _before(image, best):
    """Whether the codes ``image`` come before ``best`` (same length), in lexicographic order."""
    for i in range(len(image)):
        if image[i] != best[i]:
            return image[i] < best[i]
    return False


class Polyominoes(Job):
    """Free polyominoes of ``n`` cells, one shard per seed of ``seed`` cells (overlapping shards)."""

    name = "polyominoes"
    version = "1"
    n = Param(int, default=10, low=1, high=MOST_CELLS, help="cells")
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
        codes = codes_of(form_of(seed))[np.newaxis, :]
        for _ in range(self.n - min(self.seed, self.n)):
            codes = grown_codes(codes)
        keys = sorted(key_texts(codes))  # in the order of the text, as the plain growth's
        return ShardResult({"forms": {"key": keys, "seed": [seed] * len(keys)}}, {"emitted": len(keys)})

    def summary(self, tables: dict, totals: dict) -> str:
        return f"polyominoes: {totals.get('emitted', 0)} rows emitted, {len(tables['forms'])} distinct free forms"
