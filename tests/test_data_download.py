"""Download and verify: a dataset file served over HTTP from 127.0.0.1 lands under its canonical
name only after its checksum matches; a wrong file, a missing one, a bad archive or a download past
its deadline leaves nothing; GENFEAT_OFFLINE=1 downloads nothing."""

import hashlib
import http.server
import io
import threading
import time
import zipfile
from contextlib import contextmanager

import pytest

from genfeat.data import registry
from genfeat.data.registry import DatasetSpec, FileSpec
from genfeat.errors import ConfigError, DataError

CONTENT = b"the quick brown fox\njumps over the lazy dog\n" * 200


@contextmanager
def serve(files: dict[str, bytes]):
    """Serve ``files`` (path -> bytes) at http://127.0.0.1:PORT/path from a thread.

    Each response is sent in two halves; between them the handler runs ``on_half`` (set on the
    yielded state), so a test can look at the destination while a download is half done. With
    ``trickle`` (seconds) set on the state, the second half goes out a byte every 10 ms for that
    long before the rest follows, as from a stalling server. The server is shut down on exit, and
    its socket times out, so nothing outlives the test.
    """
    state = {"requests": 0, "on_half": None, "trickle": 0.0}

    class Handler(http.server.BaseHTTPRequestHandler):
        timeout = 10

        def do_GET(self):
            state["requests"] += 1
            body = files.get(self.path.lstrip("/"))
            if body is None:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body[: len(body) // 2])
            self.wfile.flush()
            if state["on_half"] is not None:
                state["on_half"]()
            rest, until = body[len(body) // 2:], time.monotonic() + state["trickle"]
            try:
                while rest and time.monotonic() < until:
                    self.wfile.write(rest[:1])
                    self.wfile.flush()
                    rest = rest[1:]
                    time.sleep(0.01)
                self.wfile.write(rest)
            except (BrokenPipeError, ConnectionResetError):     # the client gave up: nothing more to send
                pass

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", state
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def declare(monkeypatch, tmp_path, url: str, sha256: str | None, **kw) -> None:
    monkeypatch.setenv("GENFEAT_DATA", str(tmp_path / "data"))
    monkeypatch.setitem(registry._REGISTRY, "served", DatasetSpec("served", {"f": FileSpec("served/f.txt", url, sha256,
                                                                                            **kw)}))


def entries(tmp_path):
    folder = tmp_path / "data" / "served"
    return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []


def test_download_verifies_and_lands_atomically(tmp_path, monkeypatch):
    with serve({"f.txt": CONTENT}) as (url, state):
        declare(monkeypatch, tmp_path, f"{url}/f.txt", hashlib.sha256(CONTENT).hexdigest(), size=len(CONTENT))
        halfway = []
        state["on_half"] = lambda: halfway.append(entries(tmp_path))
        path = registry.resolve("served", "f")
        assert path == tmp_path / "data" / "served" / "f.txt" and path.read_bytes() == CONTENT
        # half way through, the bytes went to a temporary name beside the destination, not to it
        assert len(halfway) == 1 and len(halfway[0]) == 1 and halfway[0][0].startswith(".f.txt.")
        assert entries(tmp_path) == ["f.txt"]
        assert registry.resolve("served", "f") == path and state["requests"] == 1, "a verified file is not fetched again"


def test_download_with_a_wrong_checksum_is_refused_and_leaves_no_file(tmp_path, monkeypatch):
    with serve({"f.txt": CONTENT}) as (url, state):
        declare(monkeypatch, tmp_path, f"{url}/f.txt", "0" * 64)
        with pytest.raises(DataError, match=r"'.*served/f.txt' downloaded from http://127.0.0.1:\d+/f.txt has sha256 "
                                            + hashlib.sha256(CONTENT).hexdigest() + ", expected 0{64}.*fix: "):
            registry.resolve("served", "f")
        assert state["requests"] == 1 and entries(tmp_path) == []
        declare(monkeypatch, tmp_path, f"{url}/f.txt", None, size=len(CONTENT) + 1)
        with pytest.raises(DataError, match=f"has {len(CONTENT)} bytes, expected {len(CONTENT) + 1}"):
            registry.resolve("served", "f")
        assert entries(tmp_path) == []


def test_download_of_an_archive_member_and_failures(tmp_path, monkeypatch):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("inner/f.txt", CONTENT)
        zf.writestr("other.txt", b"not this one")
    with serve({"a.zip": buf.getvalue(), "broken.zip": buf.getvalue()[:100]}) as (url, state):
        digest = hashlib.sha256(CONTENT).hexdigest()
        declare(monkeypatch, tmp_path, f"{url}/a.zip", digest, archive_member="inner/f.txt")
        assert registry.resolve("served", "f").read_bytes() == CONTENT
        assert entries(tmp_path) == ["f.txt"]
        (tmp_path / "data" / "served" / "f.txt").unlink()
        for name, member, needle in [("missing.zip", "inner/f.txt", "HTTP Error 404"),
                                     ("broken.zip", "inner/f.txt", "is not a zip file"),
                                     ("a.zip", "absent.txt", "absent.txt")]:
            declare(monkeypatch, tmp_path, f"{url}/{name}", digest, archive_member=member)
            with pytest.raises(DataError, match=rf"is missing and downloading it from {url}/{name} failed .*{needle}"):
                registry.resolve("served", "f")
            assert entries(tmp_path) == [], name


def test_a_failed_download_leaves_no_folder_it_created(tmp_path, monkeypatch):
    """GENFEAT_DATA=/nonexistent and a download that fails (404, wrong checksum) left /nonexistent/<dataset>/...
    behind, empty; a folder that existed before, or one another file was written into meanwhile, is kept."""
    with serve({"f.txt": CONTENT}) as (url, _):
        for name, sha256, error in [("missing.txt", None, "HTTP Error 404"), ("f.txt", "0" * 64, "expected 0{64}")]:
            monkeypatch.setenv("GENFEAT_DATA", str(tmp_path / "nonexistent"))
            monkeypatch.setitem(registry._REGISTRY, "served", DatasetSpec("served", {
                "f": FileSpec("glue/SST-2/f.txt", f"{url}/{name}", sha256)}))
            with pytest.raises(DataError, match=error):
                registry.resolve("served", "f")
            assert not (tmp_path / "nonexistent").exists(), name
        (tmp_path / "nonexistent" / "glue").mkdir(parents=True)
        with pytest.raises(DataError, match="HTTP Error 404"):
            monkeypatch.setitem(registry._REGISTRY, "served", DatasetSpec("served", {
                "f": FileSpec("glue/SST-2/f.txt", f"{url}/missing.txt", None)}))
            registry.resolve("served", "f")
        assert [p.name for p in (tmp_path / "nonexistent").rglob("*")] == ["glue"]


def test_offline_refuses_every_download_and_says_where_to_place_the_file(tmp_path, monkeypatch):
    """GENFEAT_OFFLINE=1: a missing file is the DataError of download=False plus the reason, and no request is made."""
    with serve({"f.txt": CONTENT}) as (url, state):
        declare(monkeypatch, tmp_path, f"{url}/f.txt", hashlib.sha256(CONTENT).hexdigest())
        monkeypatch.setenv("GENFEAT_OFFLINE", "1")
        with pytest.raises(DataError, match=r"'.*served/f.txt' is missing \(data directory '.*', set by GENFEAT_DATA, "
                                            r"and GENFEAT_OFFLINE=1 forbids downloading it\)\. fix: download "
                                            rf"{url}/f.txt by hand to '.*served/f.txt'"):
            registry.resolve("served", "f")
        monkeypatch.setenv("GENFEAT_OFFLINE", "yes")
        with pytest.raises(ConfigError, match="GENFEAT_OFFLINE is 'yes'.*fix: set it to 1"):
            registry.resolve("served", "f")
        assert state["requests"] == 0 and not (tmp_path / "data").exists()
        monkeypatch.setenv("GENFEAT_OFFLINE", "0")
        assert registry.resolve("served", "f").read_bytes() == CONTENT
        monkeypatch.setenv("GENFEAT_OFFLINE", "1")
        assert registry.resolve("served", "f").read_bytes() == CONTENT, "a file in place is read offline"
        for name, value in (("GENFEAT_OFFLINE", "true"), ("GENFEAT_DOWNLOAD_TIMEOUT", "soon")):
            monkeypatch.setenv(name, value)    # refused with the file in place too, not only once one is missing
            with pytest.raises(ConfigError, match=f"{name} is '{value}'"):
                registry.resolve("served", "f")
            monkeypatch.delenv(name)


def test_a_download_past_its_deadline_is_abandoned_and_leaves_nothing(tmp_path, monkeypatch):
    """A server trickling bytes kept each receive under the 60 s socket timeout, so the download never ended;
    GENFEAT_DOWNLOAD_TIMEOUT bounds the whole download."""
    with serve({"f.txt": CONTENT}) as (url, state):
        declare(monkeypatch, tmp_path, f"{url}/f.txt", hashlib.sha256(CONTENT).hexdigest())
        state["trickle"] = 8.0
        halfway = []
        state["on_half"] = lambda: halfway.append(entries(tmp_path))
        monkeypatch.setenv("GENFEAT_DOWNLOAD_TIMEOUT", "0.5")
        start = time.monotonic()
        with pytest.raises(DataError, match=rf"downloading '.*served/f.txt' from {url}/f.txt took longer than 0.5 s "
                                            r"\(GENFEAT_DOWNLOAD_TIMEOUT; \d+ bytes received\), abandoned\. fix: download "
                                            rf"{url}/f.txt by hand to .* or set GENFEAT_DOWNLOAD_TIMEOUT to more seconds"):
            registry.resolve("served", "f")
        assert time.monotonic() - start < 4
        assert len(halfway) == 1 and len(halfway[0]) == 1, "the bytes went to a temporary file..."
        assert not (tmp_path / "data").exists(), "...which is gone, with the folders made for it"
        for value in ("soon", "0", "-1", "inf", "nan"):
            monkeypatch.setenv("GENFEAT_DOWNLOAD_TIMEOUT", value)
            with pytest.raises(ConfigError, match=f"GENFEAT_DOWNLOAD_TIMEOUT is '{value}', not a positive number"):
                registry.resolve("served", "f")
        assert state["requests"] == 1 and not (tmp_path / "data").exists()
        state["trickle"] = 0.3
        monkeypatch.setenv("GENFEAT_DOWNLOAD_TIMEOUT", "30")
        assert registry.resolve("served", "f").read_bytes() == CONTENT, "a slow download within the deadline lands"
