"""A diffusion run's sample grid: written beside its result by a real run, published with its run page, and shown
there in headless Chromium (the `browser` fixture of tests/site/conftest.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from suite import registry
from suite.harness import RunRequest, run
from suite.site.build import build_site
from suite.specload import load_spec


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> tuple[Path, Path]:
    tmp = tmp_path_factory.mktemp("dit-site")
    spec = load_spec(registry.find_workload("cv/digits_dit"), {"budget.max_steps": 10}, variant="tiny")
    result, path = run(RunRequest(spec=spec, threads=1, results_dir=tmp / "results", measure_peak=False))
    assert result.status == "budget" and path is not None, result.error
    build_site(tmp / "results", tmp / "out")
    return path, tmp / "out"


def test_the_run_page_shows_the_sample_grid(site, browser) -> None:
    result_file, out = site
    grid = result_file.with_suffix(".samples.png")
    assert grid.is_file()  # beside the result, same stem
    pages = list((out / "r").glob("*.html"))
    assert len(pages) == 1
    copy = pages[0].with_suffix(".samples.png")
    assert copy.read_bytes() == grid.read_bytes()
    ctx = browser.new_context()
    tab = ctx.new_page()
    errors: list[str] = []
    tab.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    tab.goto(pages[0].resolve().as_uri())
    tab.wait_for_load_state("load")
    img = tab.locator("#samples img")
    assert img.count() == 1
    # decoded and laid out: a broken or CSP-blocked image has naturalWidth 0
    assert img.evaluate("i => i.complete && i.naturalWidth") == 8 * 10 * 4
    assert img.evaluate("i => i.naturalHeight") == 10 * 10 * 4
    assert "one row per class" in img.get_attribute("alt")
    assert not errors, errors
    ctx.close()


def test_a_run_without_a_grid_has_no_samples_section(site) -> None:
    result_file, out = site
    page = next((out / "r").glob("*.html")).read_text()
    assert 'id="samples"' in page
    result_file.with_suffix(".samples.png").unlink()
    out2 = out.parent / "out2"
    build_site(result_file.parents[4], out2)
    assert 'id="samples"' not in next((out2 / "r").glob("*.html")).read_text()


def test_a_grid_that_is_a_symlink_is_not_published(site, tmp_path) -> None:
    """As with the MLLOG (test_site.py): only a regular file beside the result is copied, never a link's target."""
    result_file, out = site
    secret = tmp_path / "secret.png"
    secret.write_bytes(b"not for the site")
    grid = result_file.with_suffix(".samples.png")
    grid.unlink(missing_ok=True)
    grid.symlink_to(secret)
    out3 = tmp_path / "out3"
    build_site(result_file.parents[4], out3)
    assert not list(out3.rglob("*.samples.png"))
    assert 'id="samples"' not in next((out3 / "r").glob("*.html")).read_text()


# ---- issue 50 item 13: a grid's header is checked, and only runs that make grids get one -----------------------


def _png_header(width: int, height: int) -> bytes:
    """A PNG's signature and IHDR chunk (what a decoder reads first), claiming width x height pixels."""
    import struct
    import zlib

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + b"IHDR" + ihdr
            + struct.pack(">I", zlib.crc32(b"IHDR" + ihdr)) + b"\x00" * 64)


def test_a_grid_whose_header_claims_too_many_pixels_or_is_no_png_is_not_published(site, tmp_path) -> None:
    result_file, _ = site
    grid = result_file.with_suffix(".samples.png")
    kept = grid.read_bytes() if grid.is_file() and not grid.is_symlink() else None
    try:
        for data in (_png_header(50_000, 50_000), b"GIF89a" + b"\x00" * 64):
            grid.unlink(missing_ok=True)
            grid.write_bytes(data)
            out = tmp_path / f"out-{len(data)}-{data[:3].hex()}"
            build_site(result_file.parents[4], out)
            assert not list(out.rglob("*.samples.png"))
            assert 'id="samples"' not in next((out / "r").glob("*.html")).read_text()
    finally:
        grid.unlink(missing_ok=True)
        if kept is not None:
            grid.write_bytes(kept)


def test_a_grid_beside_a_run_whose_task_makes_none_is_not_attached(tmp_path) -> None:
    import json

    from suite.site.pages import run as pages

    folder = tmp_path / "results" / "cpu" / "cv" / "digits_cnn" / "torch"
    folder.mkdir(parents=True)
    spec = load_spec(registry.find_workload("cv/digits_cnn"), {"budget.max_steps": 2}, variant="tiny")
    result, path = run(RunRequest(spec=spec, threads=1, results_dir=tmp_path / "results", measure_peak=False))
    assert path is not None and json.loads(path.read_text())["config"]["spec"]["task"] not in pages.GRID_TASKS
    path.with_suffix(".samples.png").write_bytes(_png_header(40, 40))
    build_site(tmp_path / "results", tmp_path / "out")
    assert not list((tmp_path / "out").rglob("*.samples.png"))


def test_the_grid_tasks_are_the_tasks_that_write_side_files() -> None:
    from suite.site.pages import run as pages

    makers = {name for name in registry.TASKS if hasattr(registry.task_class(name), "side_files")}
    assert makers == pages.GRID_TASKS
