"""vit_tutorial.notebook: glued numbers, online-only cells and repository files.

Offline: downloads are tested against a server on 127.0.0.1 that this file starts.
"""

import http.server
import json
import sys
import threading
import types
import urllib.error
from pathlib import Path

import pytest
import yaml

from vit_tutorial import notebook
from vit_tutorial.notebook import (
    CACHE_FOLDER,
    REPOSITORY_BRANCH,
    REPOSITORY_URL,
    find_repository_root,
    glue,
    online,
    package_commit,
    raw_url,
    repository_file,
)

ROOT = Path(__file__).resolve().parents[1]
COMMIT = "0123456789abcdef0123456789abcdef01234567"


def test_repository_constants_are_those_of_config_yml():
    repository = yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]
    assert REPOSITORY_URL == repository["url"]
    assert REPOSITORY_BRANCH == repository.get("branch", "main")


# ---------------------------------------------------------------------------------------
# glue


def test_glue_prints_each_value_without_myst_nb(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "myst_nb", None)  # import myst_nb now fails
    glue("accuracy", 99.44, display=False)
    glue("wrong", 2)
    assert capsys.readouterr().out == "accuracy: 99.44\nwrong: 2\n"


def test_glue_is_myst_nbs_when_it_is_installed(monkeypatch, capsys):
    calls = []
    fake = types.ModuleType("myst_nb")
    fake.glue = lambda name, value, display=True: calls.append((name, value, display))
    monkeypatch.setitem(sys.modules, "myst_nb", fake)
    glue("accuracy", 99.44, display=False)
    glue("wrong", 2)
    assert calls == [("accuracy", 99.44, False), ("wrong", 2, True)]
    assert capsys.readouterr().out == ""


def test_glue_rejects_a_bad_name():
    with pytest.raises(TypeError, match="42"):
        glue(42, 1.0)
    with pytest.raises(ValueError, match="empty"):
        glue("", 1.0)


# ---------------------------------------------------------------------------------------
# online


@pytest.mark.parametrize(
    "variable, colab, expected",
    [(None, False, False), (None, True, True), ("1", False, True), ("0", True, False)],
)
def test_online_follows_the_variable_then_colab(monkeypatch, variable, colab, expected):
    if variable is None:
        monkeypatch.delenv("VIT_TUTORIAL_ONLINE", raising=False)
    else:
        monkeypatch.setenv("VIT_TUTORIAL_ONLINE", variable)
    if colab:
        monkeypatch.setitem(sys.modules, "google.colab", types.ModuleType("google.colab"))
    else:
        monkeypatch.delitem(sys.modules, "google.colab", raising=False)
    assert online() is expected


@pytest.mark.parametrize("value", ["yes", "true", "", " 1", "2"])
def test_online_rejects_a_bad_variable(monkeypatch, value):
    monkeypatch.setenv("VIT_TUTORIAL_ONLINE", value)
    with pytest.raises(ValueError, match=f"VIT_TUTORIAL_ONLINE='{value}'"):
        online()


# ---------------------------------------------------------------------------------------
# The commit and the address the files come from


class FakeDistribution:
    def __init__(self, direct_url: str | None):
        self.direct_url = direct_url

    def read_text(self, name):
        assert name == "direct_url.json"
        return self.direct_url


def test_the_commit_embedded_at_build_time_comes_first(monkeypatch):
    monkeypatch.setattr(notebook, "_embedded_commit", lambda: COMMIT)
    monkeypatch.setattr(notebook, "_direct_url_commit", lambda: "f" * 40)
    assert package_commit() == COMMIT


@pytest.mark.parametrize(
    "direct_url, expected",
    [
        ({"url": "https://x/y.git", "vcs_info": {"vcs": "git", "commit_id": COMMIT}}, COMMIT),
        ({"url": "file:///src", "dir_info": {"editable": True}}, REPOSITORY_BRANCH),
        ({"url": "file:///a.whl", "archive_info": {}}, REPOSITORY_BRANCH),
        ({"url": "https://x", "vcs_info": {"commit_id": "main"}}, REPOSITORY_BRANCH),
        (None, REPOSITORY_BRANCH),  # an install from an index records no direct_url.json
        ("not json", REPOSITORY_BRANCH),
    ],
)
def test_then_pips_vcs_commit_then_the_branch(monkeypatch, direct_url, expected):
    text = json.dumps(direct_url) if isinstance(direct_url, dict) else direct_url
    monkeypatch.setattr(notebook, "_embedded_commit", lambda: None)
    monkeypatch.setattr(notebook.metadata, "distribution", lambda name: FakeDistribution(text))
    assert package_commit() == expected


def test_an_editable_install_embeds_no_commit():
    # the checkout's package folder never holds the file setup.py writes into a build
    assert not (ROOT / "vit_tutorial" / "_commit.txt").exists()
    assert notebook._embedded_commit() is None


def test_raw_url_is_githubs_raw_host_or_the_variable(monkeypatch):
    monkeypatch.delenv("VIT_TUTORIAL_RAW_URL", raising=False)
    owner_and_name = REPOSITORY_URL.removeprefix("https://github.com/")
    assert raw_url() == f"https://raw.githubusercontent.com/{owner_and_name}"
    monkeypatch.setenv("VIT_TUTORIAL_RAW_URL", "http://127.0.0.1:8000/raw/")
    assert raw_url() == "http://127.0.0.1:8000/raw"
    monkeypatch.setenv("VIT_TUTORIAL_RAW_URL", "ftp://example.org")
    with pytest.raises(ValueError, match="ftp://example.org"):
        raw_url()


# ---------------------------------------------------------------------------------------
# repository_file, inside a checkout


def test_the_repository_root_is_found_from_a_subfolder(tmp_path):
    assert find_repository_root(ROOT / "book" / "solutions") == ROOT
    assert find_repository_root(tmp_path) is None
    (tmp_path / "vit_tutorial").mkdir()
    (tmp_path / "vit_tutorial" / "__init__.py").touch()
    assert find_repository_root(tmp_path) is None  # no _toc.yml: not the book's repository
    (tmp_path / "_toc.yml").touch()
    (tmp_path / "a" / "b").mkdir(parents=True)
    assert find_repository_root(tmp_path / "a" / "b") == tmp_path


def test_inside_a_checkout_the_local_file_is_returned(monkeypatch):
    monkeypatch.chdir(ROOT / "book" / "solutions")
    monkeypatch.setenv("VIT_TUTORIAL_RAW_URL", "http://127.0.0.1:9/never-used")
    path = repository_file("benchmarks/results/digits_target.json")
    assert path == ROOT / "benchmarks" / "results" / "digits_target.json"
    assert repository_file(Path("benchmarks", "_results.py")) == ROOT / "benchmarks/_results.py"
    with pytest.raises(FileNotFoundError, match="no_such_file.json"):
        repository_file("benchmarks/results/no_such_file.json")


@pytest.mark.parametrize("path", [3, None, b"benchmarks/x.json", ["benchmarks"]])
def test_a_path_of_the_wrong_type_is_refused(path):
    with pytest.raises(TypeError, match="path must be"):
        repository_file(path)


@pytest.mark.parametrize(
    "path", ["", " ", ".", "/etc/passwd", "../benchmarks/x.json", "book/../../x", "a\\b.json"]
)
def test_a_path_outside_the_repository_is_refused(path):
    with pytest.raises(ValueError, match="is not a file path relative to the repository"):
        repository_file(path)


# ---------------------------------------------------------------------------------------
# repository_file, outside a checkout: downloaded once


class Server:
    """Files under ``/<COMMIT>/<path>`` on 127.0.0.1; counts the requests."""

    def __init__(self, files: dict[str, bytes]):
        self.files, self.requests = files, []
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                server.requests.append(self.path)
                body = server.files.get(self.path.removeprefix(f"/{COMMIT}/"))
                if not self.path.startswith(f"/{COMMIT}/") or body is None:
                    self.send_error(404)
                    return
                if body == b"BROKEN":  # promise more than is sent, then hang up
                    self.send_response(200)
                    self.send_header("Content-Length", "1000")
                    self.end_headers()
                    self.wfile.write(b"{partial")
                    return
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()


@pytest.fixture
def server(tmp_path, monkeypatch):
    files = {
        "benchmarks/results/a.json": b'{"mean_accuracy": 0.99}',
        "benchmarks/run.py": b"from _helper import X\n",
        "benchmarks/_helper.py": b"X = 1\n",
        "benchmarks/results/broken.json": b"BROKEN",
    }
    served = Server(files)
    monkeypatch.setenv("VIT_TUTORIAL_RAW_URL", served.url)
    monkeypatch.setattr(notebook, "_embedded_commit", lambda: COMMIT)
    monkeypatch.chdir(tmp_path)  # a notebook opened alone: no checkout around it
    assert find_repository_root() is None
    yield served
    served.httpd.shutdown()
    served.httpd.server_close()


def test_outside_a_checkout_a_file_is_downloaded_once(server, tmp_path):
    path = repository_file("benchmarks/results/a.json")
    assert path == tmp_path / CACHE_FOLDER / COMMIT / "benchmarks" / "results" / "a.json"
    assert json.loads(path.read_text()) == {"mean_accuracy": 0.99}
    assert server.requests == [f"/{COMMIT}/benchmarks/results/a.json"]
    assert repository_file("benchmarks/results/a.json") == path
    assert len(server.requests) == 1, "the second call must use the downloaded copy"


def test_a_script_and_its_helper_land_in_one_folder(server):
    script = repository_file("benchmarks/run.py")
    helper = repository_file("benchmarks/_helper.py")
    assert script.parent == helper.parent
    assert helper.read_bytes() == b"X = 1\n"


def test_a_file_missing_at_that_commit_is_a_file_not_found_error(server, tmp_path):
    with pytest.raises(FileNotFoundError, match=f"no_such.json' at commit {COMMIT}"):
        repository_file("benchmarks/results/no_such.json")
    assert not list((tmp_path / CACHE_FOLDER).rglob("*.json")), "nothing must be left behind"


def test_another_commit_is_asked_for_its_own_files(server, monkeypatch):
    monkeypatch.setattr(notebook, "_embedded_commit", lambda: "f" * 40)
    with pytest.raises(FileNotFoundError):
        repository_file("benchmarks/results/a.json")
    assert server.requests == [f"/{'f' * 40}/benchmarks/results/a.json"]


def test_an_interrupted_download_leaves_no_file(server, tmp_path):
    with pytest.raises(urllib.error.ContentTooShortError, match="got 8 of 1000 bytes"):
        repository_file("benchmarks/results/broken.json")
    assert not [p for p in (tmp_path / CACHE_FOLDER).rglob("*") if p.is_file()]


def test_a_file_url_works_too(tmp_path, monkeypatch):
    served = tmp_path / "raw" / COMMIT / "benchmarks" / "results"
    served.mkdir(parents=True)
    (served / "a.json").write_text("{}")
    (tmp_path / "notebook").mkdir()
    monkeypatch.chdir(tmp_path / "notebook")
    monkeypatch.setenv("VIT_TUTORIAL_RAW_URL", (tmp_path / "raw").as_uri())
    monkeypatch.setattr(notebook, "_embedded_commit", lambda: COMMIT)
    assert repository_file("benchmarks/results/a.json").read_text() == "{}"
    with pytest.raises(FileNotFoundError, match="b.json"):
        repository_file("benchmarks/results/b.json")
