"""README.md's Python snippet ("From Python, STIR-style"), taken from README.md itself, runs as
a user would run it: in a folder holding ``data.hs`` and ``image.hv``, twice in a row (a second
run replaces the files of the first)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from stirgpu.formats import (
    ProjDataInMemory,
    ProjDataOnDisk,
    VoxelsOnCartesianGrid,
    read_from_file,
    read_image,
    write_image,
)
from stirgpu.recon.simulate import demo_geometry, demo_phantom

README = Path(__file__).resolve().parents[1] / "README.md"


def readme_snippet() -> str:
    """The first ```python block after the line "From Python, STIR-style:"."""
    text = README.read_text(encoding="utf-8")
    m = re.search(r"^From Python, STIR-style:\n+```python\n(.*?)^```", text, re.S | re.M)
    assert m, "README.md has no python block after 'From Python, STIR-style:'"
    return m.group(1)


def test_readme_snippet_runs_twice(tmp_path, monkeypatch):
    """Run twice in one folder, the snippet succeeds both times, and its outputs are what it says:
    estimate.hs holds subset 3 of 21's views of the forward projection (the other views 0),
    ``fwd`` the whole forward projection, back.hv the back projection it computed; the second
    run gives the same files (small data: 42 views so that 21 subsets exist)."""
    pdi, info = demo_geometry(num_views=42, num_tangential_poss=32)
    activity = demo_phantom(info).activity(info)
    rng = np.random.default_rng(7)
    monkeypatch.chdir(tmp_path)
    data = ProjDataInMemory(pdi)
    data.fill(rng.random(data.shape, dtype=np.float32))
    ProjDataOnDisk.create("data.hs", pdi, fill=data).close()
    write_image("image.hv", VoxelsOnCartesianGrid(info, fill=activity))
    code = compile(readme_snippet(), str(README), "exec")
    runs = []
    for _ in range(2):
        names: dict = {}
        exec(code, names)  # a fresh namespace each time, as a new interpreter would have
        runs.append(names)
        estimate = read_from_file("estimate.hs", allow_template=False)
        with estimate:
            for s in pdi.segment_nums:
                got = estimate.read_views(s, range(pdi.get_num_views()))
                want = names["fwd"].read_views(s, range(pdi.get_num_views()))
                np.testing.assert_array_equal(got[3::21], want[3::21])
                assert not np.delete(got, np.s_[3::21], axis=0).any() and want.any()
        np.testing.assert_array_equal(read_image("back.hv").as_array(), names["back"])
    np.testing.assert_array_equal(runs[0]["back"], runs[1]["back"])
