"""Jupyter: records as rich HTML (IPython's formatter registry, registered
lazily), and the %%feedprof cell magic, in a real IPython shell."""
import json
import os
import subprocess
import sys
import textwrap

import pytest

from feedprof.store.reasons import ScriptFailed, Verdict
from feedprof.store import Recommendation, TuneResult, save  # noqa: E402
from tests.records import make_trial  # noqa: E402

SETUP = """
import time
import torch
from torch.utils.data import DataLoader, Dataset

class Slow(Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        time.sleep(0.002)
        return torch.zeros(4)

loader = DataLoader(Slow(), batch_size=4)
"""
LOOP = SETUP + """
for epoch in range(2):
    for x in loader:
        time.sleep(0.001)
"""
LOOP_LINE = LOOP.lstrip().splitlines().index("    for x in loader:") + 1  # IPython drops leading blank lines
WATCHED = SETUP + """
import feedprof
with feedprof.profile(interval_s=0.05) as prof:
    for epoch in range(2):
        for x in prof.watch(loader):
            time.sleep(0.001)
"""


@pytest.fixture
def shell(IPython, torch):
    """A fresh IPython shell, as a notebook kernel has one (get_ipython() returns it)."""
    from IPython.core.interactiveshell import InteractiveShell

    InteractiveShell.clear_instance()
    sh = InteractiveShell.instance()
    yield sh
    InteractiveShell.clear_instance()


@pytest.fixture(scope="module")
def run(torch):
    ns = {}
    exec(compile(WATCHED, "loop.py", "exec"), ns)
    return ns["prof"].run


def html_of(shell, obj):
    data, _ = shell.display_formatter.format(obj)
    return data.get("text/html")


def test_records_get_rich_output_once_the_api_is_used_in_the_shell(shell, run, tmp_path):
    path = str(tmp_path / "run.json")
    save(run, path)
    assert html_of(shell, run.summary) is None  # nothing registered yet in this shell
    loaded = shell.run_cell(f"import feedprof\nfeedprof.load({path!r})").result
    page = html_of(shell, loaded)
    assert page.startswith('<div class="feedprof-nb"><style>') and "<html" not in page
    assert "the loop waits for data" in page and "<svg" in page  # the verdict and the curves
    assert "the loop waits for data" in html_of(shell, run.summary) and "<svg" not in html_of(shell, run.summary)


def test_a_summary_left_as_a_cells_last_value_shows_as_html(shell, run):
    """prof.summary() (what a notebook user gets) has its own _repr_html_, as the profile has: no
    registration needed, and a plain-text print still words it."""
    from feedprof.session import PrintableSummary

    summary = PrintableSummary.of(run.summary)
    page = html_of(shell, summary)
    assert page.startswith('<div class="feedprof-nb"><style>') and "the loop waits for data" in page
    assert "<svg" not in page and "the loop waits for data" in str(summary)
    shown = shell.run_cell(WATCHED + "prof.summary()").result
    assert "feedprof summary" in html_of(shell, shown)


def test_load_ext_registers_and_a_live_profile_shows_itself(shell, run):
    shell.run_cell("%load_ext feedprof")
    assert "feedprof-nb" in html_of(shell, run)
    prof = shell.run_cell(WATCHED + "prof").result
    assert prof.run.loaders and "<svg" in html_of(shell, prof)


def test_a_tune_result_shows_its_recommendation_and_curves(shell, run):
    shell.run_cell("%load_ext feedprof")
    trials = (make_trial(index=0, role="baseline", config={"num_workers": 0}, state="ok", batches_per_s=10.0, run=run),
              make_trial(index=1, role="search", config={"num_workers": 4}, state="ok", batches_per_s=30.0, run=run),
              make_trial(index=2, role="search", config={"num_workers": 8}, state="rejected",
                    cause=ScriptFailed(error="over <RAM>")))
    verdict = Verdict(kind="faster", input_bound="highly", config={"num_workers": 4}, speedup=3.0)
    rec = Recommendation(framework="torch", config={"num_workers": 4}, trial_index=1, batches_per_s=30.0,
                         speedup=3.0, verdict=verdict, paste_line="DataLoader(ds, num_workers=4)",
                         loader_site="train.py:9", input_bound="highly")
    page = html_of(shell, TuneResult(script="/x/train.py", framework="torch", trials=trials, recommendation=rec))
    assert "num_workers=4 is 3.0× faster" in page and "DataLoader(ds, num_workers=4)" in page
    assert page.count("<svg") == 2  # the throughput chart and one curves figure (baseline and pick)
    assert "#1 recommended" in page and "over &lt;RAM&gt;" in page and "<script" not in page


def test_cell_magic_times_the_loaders_the_cell_iterates(shell, tmp_path, DataLoader):
    shell.run_cell("%load_ext feedprof")
    original = DataLoader.__dict__["__iter__"]
    out = tmp_path / "cell.json"
    res = shell.run_cell(f"%%feedprof --out {out} --warmup-batches 2\n" + LOOP)
    assert res.success, res.error_in_exec
    run = res.result
    assert DataLoader.__dict__["__iter__"] is original  # undone after the cell
    (rec,) = run.loaders
    assert rec.framework == "torch" and rec.site == f"cell line {LOOP_LINE}" and rec.batches == 32
    assert len(rec.epochs.first_batch_s) == 2 and rec.batch_size == 4
    assert run.summary.batches_measured == 32 - 2 * 1 - 2  # first batch of each epoch, then the warm-up
    assert json.loads(out.read_text())["schema"] == "feedprof.run/1"
    assert f"cell line {LOOP_LINE}" in html_of(shell, run)
    again = shell.run_cell("for x in loader: pass\nx.shape")
    assert again.success and tuple(again.result) == (4, 4)  # plain DataLoader again


def test_cell_magic_without_a_loader_and_with_bad_options(shell, capsys):
    shell.run_cell("%load_ext feedprof")
    assert shell.run_cell("%%feedprof\nx = sum(range(10))").result is None
    assert "iterated no torch DataLoader" in capsys.readouterr().err
    assert shell.run_cell("%%feedprof --bogus\nx = 1").result is None
    assert "unrecognized arguments: --bogus" in capsys.readouterr().err


def test_cell_magic_when_the_cell_itself_imports_torch(tmp_path, IPython, torch, e2e):
    """The kernel has not imported torch yet: the patch waits for the cell's import."""
    code = textwrap.dedent(f"""
        import sys
        from IPython.core.interactiveshell import InteractiveShell
        shell = InteractiveShell.instance()
        shell.run_cell("%load_ext feedprof")
        assert "torch" not in sys.modules
        run = shell.run_cell({("%%feedprof" + LOOP)!r}).result
        from torch.utils.data import DataLoader
        print(run.loaders[0].batches, DataLoader.__iter__.__module__)
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split()[-2:] == ["32", "torch.utils.data.dataloader"]
