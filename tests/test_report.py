"""The HTML report: escaping, deterministic re-rendering, bad input, and a real
headless browser (no console errors, no network requests, not blank)."""
import html
import os
import shutil

import pytest

import feedprof
from feedprof.render.words import headline
from tests.conftest import run_feedprof, write_script


XSS = "<script>alert(1)</script>"
REQUIRE_BROWSER = os.environ.get("FEEDPROF_REQUIRE_BROWSER") == "1"  # set by .ci/run


@pytest.fixture(scope="module")
def tuned(tmp_path_factory, e2e, torch):
    """A real quick tune of a script whose path and arguments carry an XSS payload."""
    root = tmp_path_factory.mktemp("report")
    evil_dir = root / "<script>alert(1)<"
    evil_dir.mkdir()
    script = write_script(evil_dir, "script>.py", """
        import sys, time
        import torch
        from torch.utils.data import DataLoader, Dataset

        class Slow(Dataset):
            def __len__(self):
                return 400
            def __getitem__(self, i):
                time.sleep(0.004)
                return torch.zeros(8), i

        if __name__ == "__main__":
            assert sys.argv[1] == "<script>alert(1)</script>"
            for epoch in range(20):
                for batch in DataLoader(Slow(), batch_size=4, num_workers=0):
                    time.sleep(0.002)
        """)
    assert XSS in script
    out = root / "out"
    proc = run_feedprof(["tune", "--out", str(out), "--budget", "25", "--window-seconds", "0.5",
                         "--min-window-batches", "15", "--warmup-batches", "2", "--max-workers", "8",
                         "--interval", "0.1", "--quiet", script, "--", XSS])
    assert proc.returncode == 0, proc.stderr
    return out


def test_tune_writes_a_report_with_every_section(tuned):
    page = (tuned / "report.html").read_text()
    for section in ("class=\"verdict", "Run details", "Throughput of every config tried", "Utilisation over time, every trial",
                    "All trials", "button class=\"copy\"", "<svg"):
        assert section in page
    result = feedprof.load(str(tuned / "results.json"))
    assert html.escape(headline(result.recommendation.verdict, result.framework)) in page


def test_user_strings_are_escaped(tuned):
    page = (tuned / "report.html").read_text()
    assert XSS not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert page.count("<script>") == 1  # ours: the copy button


def test_rerendering_a_saved_tune_gives_the_same_page(tuned, tmp_path):
    again = tmp_path / "again.html"
    proc = run_feedprof(["report", str(tuned / "results.json"), "-o", str(again)])
    assert proc.returncode == 0, proc.stderr
    assert again.read_bytes() == (tuned / "report.html").read_bytes()


def test_report_of_a_profile_run(tmp_path, e2e, torch):
    script = write_script(tmp_path, "train.py", """
        import time, torch
        from torch.utils.data import DataLoader
        for b in DataLoader(list(range(120)), batch_size=2):
            time.sleep(0.001)
        """)
    out = tmp_path / "out"
    proc = run_feedprof(["profile", "--out", str(out), "--window-batches", "30", "--interval", "0.1", script])
    assert proc.returncode == 0, proc.stderr
    page = (out / "report.html").read_text()
    assert "feedprof profile" in page and "Loaders seen" in page and "Throughput of every config" not in page
    again = tmp_path / "again.html"
    assert run_feedprof(["report", str(out / "run.json"), "-o", str(again)]).returncode == 0
    assert again.read_bytes() == (out / "report.html").read_bytes()


@pytest.mark.parametrize("content,message", [
    (None, "no such file"),
    ("{not json", "not JSON"),
    ('{"hello": "world"}', "not a feedprof file"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, content, message, cli):
    path = tmp_path / "x.json"
    if content is not None:
        path.write_text(content)
    proc = cli(["report", str(path)])
    assert proc.returncode == 2
    assert message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert "Traceback" not in proc.stderr


def _chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


def _not_blank(png_path):
    from matplotlib.image import imread

    img = imread(png_path)[..., :3]
    flat = img.reshape(-1, 3)
    background = flat[0]
    differs = (abs(flat - background).sum(axis=1) > 0.1).mean()
    return differs


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_report_in_a_real_headless_browser(tuned, tmp_path, scheme):
    chromium = _chromium()
    if chromium is None:
        if REQUIRE_BROWSER:
            pytest.fail("chromium is not installed (.ci/run installs Debian's chromium)")
        pytest.skip("no chromium on this machine")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        if REQUIRE_BROWSER:
            raise
        pytest.skip("playwright is not installed")
    page_path = tuned / "report.html"
    errors, requests, dialogs = [], [], []
    shot = tmp_path / f"report-{scheme}.png"
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=[
            "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync"])
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900}, color_scheme=scheme)
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.on("request", lambda r: requests.append(r.url))
            page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
            page.goto(page_path.as_uri())
            page.wait_for_load_state("load")
            page.screenshot(path=str(shot), full_page=True)
            assert page.locator("svg.chart").count() >= 2
            page.click("button.copy")  # the copy button runs without errors
        finally:
            browser.close()
    assert errors == []
    assert requests == [page_path.as_uri()]  # the page itself, nothing else
    assert dialogs == []  # the payload in the script's name never ran
    assert _not_blank(str(shot)) > 0.02
    keep = os.environ.get("FEEDPROF_KEEP_SCREENSHOTS")  # a directory, to look at them yourself
    if keep:
        shutil.copy(shot, os.path.join(keep, shot.name))


def test_written_paths_are_shown_as_given_or_shorter(tmp_path, cli):
    """``-o /abs/path`` from deep elsewhere is printed absolute, not as ../../..; a path under the working
    directory stays relative."""
    from feedprof.store import Run, save
    from feedprof.units import fmt_path

    save(Run(), str(tmp_path / "run.json"))
    deep = tmp_path.joinpath(*["d"] * 40)
    deep.mkdir(parents=True)
    proc = cli(["report", str(tmp_path / "run.json"), "-o", str(tmp_path / "r.html")], cwd=deep)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.strip() == f"feedprof: wrote {tmp_path / 'r.html'}"
    assert fmt_path(str(deep / "out" / "run.json")) == os.path.join("out", "run.json")


def test_the_paste_is_introduced_by_the_lines_it_replaces():
    """An HF Trainer's settings are pasted over TrainingArguments(...) at line 23, not at the Trainer(...) call
    (the loader's site, line 26); several statements, or a command line, are said as such."""
    from feedprof.render.html import tune_verdict
    from feedprof.render.words import paste_intro
    from feedprof.store import Recommendation, TuneResult
    from feedprof.store.reasons import Verdict

    hf = "args = TrainingArguments(output_dir='o', dataloader_num_workers=4)  # hf_train.py:23"
    assert paste_intro(hf, "hf_train.py:26") == "Paste this in place of the statement at hf_train.py:23:"
    two = "train = DataLoader(ds, num_workers=4)  # train.py:9\nworkers = 4  # conf.py:3\npython train.py -j 4"
    assert paste_intro(two, "train.py:9") == ("Paste each line in place of the statement it names "
                                              "(train.py:9, conf.py:3), and run the command line:")
    assert paste_intro("python train.py -j 4", "train.py:9") == "Run this:"
    assert paste_intro("DataLoader(ds, num_workers=4)", "train.py:9") == "Paste this at train.py:9:"
    verdict = Verdict(kind="faster", input_bound="highly", config={"num_workers": 4}, speedup=3.0)
    rec = Recommendation(framework="torch", config={"num_workers": 4}, trial_index=1, batches_per_s=30.0,
                         speedup=3.0, verdict=verdict, paste_line=hf, loader_site="hf_train.py:26")
    page = tune_verdict(TuneResult(script="/x/hf_train.py", framework="torch", recommendation=rec))
    assert "in place of the statement at <code>hf_train.py:23</code>" in page and "hf_train.py:26</code>" not in page
