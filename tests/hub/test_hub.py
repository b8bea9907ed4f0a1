"""cera's Hugging Face Hub client against a local Hub (scripts/hub_fixture_server.py, loopback),
and against the real `huggingface_hub` client sharing the same cache.

Needs CERA_BIN (the cera binary) and the SmolLM2 model in cera's cache (`cera pull`).
"""

import hashlib
import json
import os
import pathlib
import subprocess
import sys
import urllib.request

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
CERA = os.environ.get("CERA_BIN", str(ROOT / "target" / "release" / "cera"))
CERA_HOME = pathlib.Path(os.environ.get("CERA_HOME", pathlib.Path.home() / ".cache" / "cera"))
SMOL = CERA_HOME / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOL_REPO = "cera-test/SmolLM2-135M-Instruct-GGUF"
SMOL_FILE = "SmolLM2-135M-Instruct-Q4_1.gguf"
TOKEN = "hf_fixture_secret"
CKPT_REPO = "cera-test/SmolLM2-135M-Instruct"


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for b in iter(lambda: f.read(1 << 20), b""):
            h.update(b)
    return h.hexdigest()


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    assert pathlib.Path(CERA).exists(), f"CERA_BIN {CERA} does not exist: build cera first"
    assert SMOL.exists(), f"{SMOL} is missing: run `cera pull` first"
    d = tmp_path_factory.mktemp("hub")
    small = d / "small.bin"
    small.write_bytes(os.urandom(300_000))
    small2 = d / "small2.bin"
    small2.write_bytes(os.urandom(200_000))
    split = subprocess.run(
        [CERA, "split", str(SMOL), str(d / "SmolLM2-135M-Instruct-Q4_1"), "--max-tensors", "100"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert len(split) == 3, split
    config = {
        "token": TOKEN,
        "repos": {
            SMOL_REPO: {
                "revisions": [
                    {"refs": ["main"], "files": {SMOL_FILE: str(SMOL), "README.md": {"text": "# SmolLM2\n"}}}
                ]
            },
            "cera-test/SmolLM2-split": {
                "revisions": [
                    {"refs": ["main"], "files": {f"Q4_1/{pathlib.Path(p).name}": p for p in split}}
                ]
            },
            "cera-test/quants": {
                "page_size": 2,
                "revisions": [
                    {
                        "refs": ["main"],
                        "files": {
                            "config.json": {"text": "{}"},
                            "mmproj-m-Q8_0.gguf": str(small2),
                            "m-Q4_K_M.gguf": str(small),
                            "m-Q8_0.gguf": str(small2),
                            "sub/m-Q2_K-00001-of-00002.gguf": str(small),
                            "sub/m-Q2_K-00002-of-00002.gguf": str(small2),
                        },
                    }
                ],
            },
            "cera-test/revs": {
                "revisions": [
                    {"tags": ["v1"], "files": {"m-Q8_0.gguf": str(small)}},
                    {"refs": ["main"], "files": {"m-Q8_0.gguf": str(small2)}},
                ]
            },
            "cera-test/private": {
                "private": True,
                "revisions": [{"refs": ["main"], "files": {"m-Q8_0.gguf": str(small)}}],
            },
            "cera-test/faults": {
                "revisions": [{"refs": ["main"], "files": {"big-Q8_0.gguf": str(SMOL), "c-Q8_0.gguf": str(small)}}]
            },
        },
    }
    # a safetensors checkpoint of SmolLM2 (as scripts/make-hf-checkpoint.py writes it)
    ckpt = d / "SmolLM2-135M-Instruct"
    subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "make-hf-checkpoint.py"), str(SMOL), str(ckpt), "--dtype", "bf16"],
        check=True,
    )
    config["repos"][CKPT_REPO] = {
        "revisions": [{"refs": ["main"], "files": {f.name: str(f) for f in ckpt.iterdir()}}]
    }
    cfg = d / "hub.json"
    cfg.write_text(json.dumps(config))
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "scripts" / "hub_fixture_server.py"), str(cfg)],
        stdout=subprocess.PIPE,
        text=True,
    )
    port, _cdn = proc.stdout.readline().split()
    endpoint = f"http://127.0.0.1:{port}"
    yield {"endpoint": endpoint, "small": small, "small2": small2, "checkpoint": ckpt}
    proc.terminate()
    proc.wait(timeout=10)


def post(hub, path, obj):
    req = urllib.request.Request(hub["endpoint"] + path, data=json.dumps(obj).encode(), method="POST")
    urllib.request.urlopen(req).read()


def server_log(hub):
    return json.loads(urllib.request.urlopen(hub["endpoint"] + "/_log").read())


@pytest.fixture
def hf_home(tmp_path, hub):
    post(hub, "/_fault", {"clear": True})
    post(hub, "/_log/clear", {})
    return tmp_path / "hf"


def env_for(hub, hf_home, **extra):
    env = dict(os.environ)
    for k in ("HF_TOKEN", "HF_HUB_OFFLINE", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        env.pop(k, None)
    env["HF_HOME"] = str(hf_home)
    env["HF_ENDPOINT"] = hub["endpoint"]
    env.update(extra)
    return env


def cera(args, env, check=True):
    p = subprocess.run([CERA, *args], env=env, capture_output=True, text=True, timeout=300)
    if check:
        assert p.returncode == 0, f"cera {' '.join(args)} failed:\n{p.stderr}"
    return p


def repo_dir(hf_home, repo):
    return hf_home / "hub" / ("models--" + repo.replace("/", "--"))


def test_pull_stores_the_hub_layout_that_huggingface_hub_reads(hub, hf_home):
    env = env_for(hub, hf_home)
    p = cera(["pull", f"hf://{SMOL_REPO}/{SMOL_FILE}"], env)
    path = pathlib.Path(p.stdout.strip())
    want = sha256(SMOL)
    rd = repo_dir(hf_home, SMOL_REPO)
    commit = (rd / "refs" / "main").read_text().strip()
    assert path == rd / "snapshots" / commit / SMOL_FILE
    assert os.readlink(path) == f"../../blobs/{want}", "a relative symlink to the blob, as huggingface_hub makes"
    assert sha256(path) == want
    assert not list((rd / "blobs").glob("*.incomplete"))
    # A log gets a few plain lines, not a `\r` update per percent.
    assert "\r" not in p.stderr and p.stderr.count("downloading") <= 8, p.stderr

    # The real client finds it without the network...
    from huggingface_hub import hf_hub_download

    os.environ["HF_HOME"] = str(hf_home)
    got = hf_hub_download(SMOL_REPO, SMOL_FILE, cache_dir=str(hf_home / "hub"), local_files_only=True)
    assert pathlib.Path(got) == path
    # ...and online it reuses our blob instead of downloading it again.
    post(hub, "/_log/clear", {})
    got = hf_hub_download(SMOL_REPO, SMOL_FILE, cache_dir=str(hf_home / "hub"), endpoint=hub["endpoint"])
    assert pathlib.Path(got) == path
    assert not [e for e in server_log(hub) if e[0] == "GET" and e[1].startswith("/cdn/")], server_log(hub)

    # A second pull is served from the cache: no byte transferred.
    post(hub, "/_log/clear", {})
    p = cera(["pull", f"hf://{SMOL_REPO}/{SMOL_FILE}"], env)
    assert "in the cache" in p.stderr
    assert not [e for e in server_log(hub) if e[1].startswith("/cdn/")]


def test_cera_runs_what_huggingface_hub_fetched_offline(hub, hf_home):
    from huggingface_hub import hf_hub_download

    hf_hub_download(SMOL_REPO, SMOL_FILE, cache_dir=str(hf_home / "hub"), endpoint=hub["endpoint"])
    post(hub, "/_log/clear", {})
    args = ["run", "--raw", "--temp", "0", "-n", "12", "-p", "The capital of France is"]
    offline = cera(["--hf", f"{SMOL_REPO}:Q4_1", *args], env_for(hub, hf_home, HF_HUB_OFFLINE="1"))
    assert server_log(hub) == [], "offline mode must not touch the network"
    local = cera(["run", "-m", str(SMOL), *args[1:]], env_for(hub, hf_home))
    assert offline.stdout == local.stdout and offline.stdout.strip(), (offline.stdout, local.stdout)


def test_a_split_gguf_on_the_hub_runs_as_the_whole_file(hub, hf_home):
    args = ["run", "--raw", "--temp", "0", "-n", "12", "-p", "Once upon a time"]
    env = env_for(hub, hf_home)
    split = cera(["--hf", "cera-test/SmolLM2-split:Q4_1", *args], env)
    assert "(3/3)" in split.stderr, split.stderr
    local = cera(["run", "-m", str(SMOL), *args[1:]], env)
    assert split.stdout == local.stdout and split.stdout.strip()


def test_offline_with_an_empty_cache_is_a_clear_error(hub, hf_home):
    p = cera(["pull", f"hf://{SMOL_REPO}:Q4_1"], env_for(hub, hf_home, HF_HUB_OFFLINE="1"), check=False)
    assert p.returncode != 0
    assert "HF_HUB_OFFLINE" in p.stderr and "not in the cache" in p.stderr, p.stderr
    assert server_log(hub) == []


def test_an_unreachable_hub_falls_back_to_the_cache(hub, hf_home):
    cera(["pull", "hf://cera-test/quants:Q8_0"], env_for(hub, hf_home))
    p = cera(["pull", "hf://cera-test/quants:Q8_0"], env_for(hub, hf_home, HF_ENDPOINT="http://127.0.0.1:9"))
    assert "not reachable" in p.stderr and p.stdout.strip().endswith("m-Q8_0.gguf"), p.stderr


def test_quant_tags_pick_files_as_llama_cpp_does(hub, hf_home):
    env = env_for(hub, hf_home)
    # No tag: Q4_K_M first; mmproj files are never the model; the tree is paginated (2 per page).
    assert cera(["pull", "hf://cera-test/quants"], env).stdout.strip().endswith("/m-Q4_K_M.gguf")
    assert cera(["--hf", "cera-test/quants:q8_0", "pull"], env).stdout.strip().endswith("/m-Q8_0.gguf")
    # A split GGUF: every part is fetched, the first is the one to load.
    out = cera(["pull", "hf://cera-test/quants:Q2_K"], env).stdout.strip()
    assert out.endswith("sub/m-Q2_K-00001-of-00002.gguf"), out
    assert pathlib.Path(out.replace("00001-of", "00002-of")).exists()
    p = cera(["pull", "hf://cera-test/quants:Q5_K_M"], env, check=False)
    assert p.returncode != 0 and "no GGUF for quant 'Q5_K_M'" in p.stderr and "m-Q8_0.gguf" in p.stderr, p.stderr
    p = cera(["--hf", "cera-test/nope", "pull"], env, check=False)
    assert p.returncode != 0 and "401" in p.stderr and "HF_TOKEN" in p.stderr, p.stderr


def test_revisions_are_pinned_and_recorded(hub, hf_home):
    env = env_for(hub, hf_home)
    old = cera(["pull", "hf://cera-test/revs@v1/m-Q8_0.gguf"], env).stdout.strip()
    new = cera(["pull", "hf://cera-test/revs/m-Q8_0.gguf"], env).stdout.strip()
    assert sha256(old) == sha256(hub["small"]) and sha256(new) == sha256(hub["small2"])
    rd = repo_dir(hf_home, "cera-test/revs")
    c1 = (rd / "refs" / "v1").read_text().strip()
    assert f"/snapshots/{c1}/" in old
    by_commit = cera(["pull", f"hf://cera-test/revs@{c1}/m-Q8_0.gguf"], env).stdout.strip()
    assert by_commit == old


def test_a_private_repo_needs_the_token(hub, hf_home):
    p = cera(["pull", "hf://cera-test/private:Q8_0"], env_for(hub, hf_home), check=False)
    assert p.returncode != 0 and "HF_TOKEN" in p.stderr, p.stderr
    p = cera(["pull", "hf://cera-test/private:Q8_0"], env_for(hub, hf_home, HF_TOKEN="hf_wrong"), check=False)
    assert p.returncode != 0 and "refused" in p.stderr, p.stderr
    out = cera(["pull", "hf://cera-test/private:Q8_0"], env_for(hub, hf_home, HF_TOKEN=TOKEN)).stdout.strip()
    assert sha256(out) == sha256(hub["small"])


def test_a_cut_connection_resumes_with_a_range(hub, hf_home):
    env = env_for(hub, hf_home)
    post(hub, "/_fault", {"path": "big-Q8_0.gguf", "cut_after": 10_000_000, "times": 1})
    p = cera(["pull", "hf://cera-test/faults/big-Q8_0.gguf"], env)
    assert sha256(p.stdout.strip()) == sha256(SMOL)
    assert "retrying from byte 10000000" in p.stderr, p.stderr
    ranges = [e[2] for e in server_log(hub) if e[1].startswith("/cdn/")]
    assert ranges == [None, "bytes=10000000-"], ranges


def test_an_interrupted_download_resumes_in_the_next_run(hub, hf_home):
    env = env_for(hub, hf_home)
    # Every attempt stops at byte 4 MB: cera gives up, keeping what it has.
    post(hub, "/_fault", {"path": "big-Q8_0.gguf", "cut_after": 4_000_000, "times": 100})
    p = cera(["pull", "hf://cera-test/faults/big-Q8_0.gguf"], env, check=False)
    assert p.returncode != 0 and "run again to resume" in p.stderr, p.stderr
    part = list((repo_dir(hf_home, "cera-test/faults") / "blobs").glob("*.incomplete"))
    assert len(part) == 1 and part[0].stat().st_size == 4_000_000
    post(hub, "/_fault", {"clear": True})
    post(hub, "/_log/clear", {})
    p = cera(["pull", "hf://cera-test/faults/big-Q8_0.gguf"], env)
    assert "resuming" in p.stderr, p.stderr
    assert sha256(p.stdout.strip()) == sha256(SMOL)
    ranges = [e[2] for e in server_log(hub) if e[1].startswith("/cdn/")]
    assert ranges == ["bytes=4000000-"], ranges


def test_a_corrupted_blob_is_an_error_and_leaves_nothing(hub, hf_home):
    env = env_for(hub, hf_home)
    post(hub, "/_fault", {"path": "c-Q8_0.gguf", "corrupt": True})
    p = cera(["pull", "hf://cera-test/faults/c-Q8_0.gguf"], env, check=False)
    assert p.returncode != 0 and "sha256 mismatch" in p.stderr, p.stderr
    rd = repo_dir(hf_home, "cera-test/faults")
    assert not list((rd / "blobs").iterdir()), list((rd / "blobs").iterdir())
    assert not (rd / "snapshots").exists() or not list((rd / "snapshots").rglob("*.gguf"))


def test_bad_hub_arguments_are_clear_errors(hub, hf_home):
    env = env_for(hub, hf_home)
    for args, want in [
        (["--hf", "not-a-repo", "pull"], "expected <org>/<repo>"),
        (["pull", "hf://org/repo/../x.gguf"], "'..'"),
        (["--hf", "a/b", "run", "-m", str(SMOL), "-p", "x"], "give one of them"),
        (["--hf-file", "x.gguf", "pull"], "--hf-file needs --hf"),
    ]:
        p = cera(args, env, check=False)
        assert p.returncode != 0 and want in p.stderr, (args, p.stderr)


def test_a_safetensors_repo_is_converted_once_and_runs(hub, hf_home, tmp_path):
    env = env_for(hub, hf_home, CERA_HOME=str(tmp_path / "cera"))
    args = ["run", "--raw", "--temp", "0", "-n", "12", "-p", "The capital of France is"]
    first = cera(["--hf", CKPT_REPO, *args], env)
    assert "safetensors checkpoint; converting it to Q4_K_M" in first.stderr, first.stderr
    converted = list((tmp_path / "cera" / "converted").rglob("Q4_K_M.gguf"))
    assert len(converted) == 1, converted
    # the same bytes as converting the folder by hand (names from the repo id aside: compare
    # what runs)
    local = tmp_path / "local-q4_k_m.gguf"
    cera(["convert", str(hub["checkpoint"]), "--outtype", "q4_k_m", "-o", str(local)], env)
    by_hand = cera(["run", "-m", str(local), *args[1:]], env)
    assert first.stdout == by_hand.stdout and first.stdout.strip(), (first.stdout, by_hand.stdout)

    # the second run converts nothing and downloads nothing
    post(hub, "/_log/clear", {})
    second = cera(["--hf", CKPT_REPO, *args], env)
    assert "converting" not in second.stderr and second.stdout == first.stdout, second.stderr
    assert not [e for e in server_log(hub) if e[1].startswith("/cdn/")], server_log(hub)
    # a tag is the type; another type is another conversion
    q8 = cera(["--hf", f"{CKPT_REPO}:Q8_0", *args], env)
    assert "converting it to Q8_0" in q8.stderr, q8.stderr

    # huggingface_hub sees the checkpoint files cera fetched
    from huggingface_hub import snapshot_download

    snap = snapshot_download(CKPT_REPO, cache_dir=str(hf_home / "hub"), local_files_only=True)
    assert sorted(p.name for p in pathlib.Path(snap).iterdir()) == sorted(p.name for p in hub["checkpoint"].iterdir())


def test_convert_takes_a_hub_repo(hub, hf_home, tmp_path):
    env = env_for(hub, hf_home, CERA_HOME=str(tmp_path / "cera"))
    out = tmp_path / "smol-f16.gguf"
    p = cera(["--hf", CKPT_REPO, "convert", "--outtype", "f16", "-o", str(out)], env)
    assert p.stdout.strip() == str(out) and "pre-tokenizer 'smollm'" in p.stderr, p.stderr
    import gguf

    r = gguf.GGUFReader(str(out))
    # names come from the repo id, not from the snapshot folder (a commit hash)
    assert r.fields["general.name"].contents() == "SmolLM2 135M Instruct"
    assert r.fields["general.organization"].contents() == "Cera Test"
    assert r.fields["general.size_label"].contents() == "135M"
    p = cera(["--hf", f"{CKPT_REPO}:Q8_0", "convert", "-o", str(out)], env, check=False)
    assert p.returncode != 0 and "--outtype" in p.stderr, p.stderr
    p = cera(["--hf", SMOL_REPO, "convert", "-o", str(out)], env, check=False)
    assert p.returncode != 0 and "not a safetensors checkpoint" in p.stderr, p.stderr
