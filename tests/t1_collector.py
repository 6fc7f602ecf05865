"""The collector's pace while imports run (ingest.CollectorPace): raised by
the first import, set back by the last, whatever order they end in and
however they end, with what they made and hold moved to the oldest
generation instead of walked by the next young collection."""
from __future__ import annotations

import gc

import pytest

from webfs import ingest


def test_the_pace_is_the_imports_until_the_last_ends():
    before = gc.get_threshold()
    pace = ingest.CollectorPace()
    try:
        gc.set_threshold(50_000, 20, 20)
        first, second = pace.importing(), pace.importing()
        first.__enter__()
        assert gc.get_threshold() == (ingest.IMPORT_GC_ALLOCATIONS, 20, 20)
        second.__enter__()
        first.__exit__(None, None, None)         # the first ends while the second runs
        assert gc.get_threshold() == (ingest.IMPORT_GC_ALLOCATIONS, 20, 20)
        with pytest.raises(RuntimeError):
            with pace.importing():                # a third, failing
                raise RuntimeError("import failed")
        assert gc.get_threshold() == (ingest.IMPORT_GC_ALLOCATIONS, 20, 20)
        second.__exit__(None, None, None)
        assert gc.get_threshold() == (50_000, 20, 20) and pace.imports == 0
        young = []
        gc.callbacks.append(lambda phase, info: young.append(info["generation"]) if phase == "start" else None)
        try:
            with pace.importing():                # what an import made and holds: not walked young
                kept = [[] for _ in range(100_000)]
            more = [[] for _ in range(1000)]      # past the pace set back: no collection started
        finally:
            gc.callbacks.pop()
        assert young == [] and gc.get_freeze_count() == 0 and len(kept) + len(more) == 101_000
        gc.set_threshold(2_000_000, 10, 10)       # a pace above the imports' is kept
        with pace.importing():
            assert gc.get_threshold() == (2_000_000, 10, 10)
    finally:
        gc.set_threshold(*before)
