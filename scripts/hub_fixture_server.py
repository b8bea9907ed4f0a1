#!/usr/bin/env python3
"""A local stand-in for the Hugging Face Hub's HTTP API, for tests (loopback only).

Serves the routes the Hub clients use (cera's, huggingface_hub's, llama.cpp's):

  GET  /api/models/{org}/{repo}/revision/{rev}     {"id", "sha", "siblings": [...]}
  GET  /api/models/{org}/{repo}/tree/{rev}[/{dir}] the file list (paginated with Link: rel="next")
  GET  /api/models/{org}/{repo}/refs               branches and tags with their commits
  HEAD|GET /{org}/{repo}/resolve/{rev}/{path}      regular files: the bytes, ETag = git oid;
                                                   LFS files: 302 to the "CDN" with X-Linked-Etag
                                                   (the sha256) and X-Linked-Size
  HEAD|GET /cdn/{sha256}                           on a second port (another origin, like the
                                                   real CDN): the bytes, with HTTP ranges

Both answers carry X-Repo-Commit. Faults for tests, set with POST /_fault (JSON):
  {"path": P, "cut_after": N, "times": K}  the next K transfers of P break off at byte N of the
                                           file (a resumed one starting there gets nothing)
  {"path": P, "corrupt": true}             P is served with one byte flipped
  {"clear": true}                          no faults
GET /_log returns the requests seen ([method, path, range header]); POST /_log/clear empties it.

The repos come from a JSON config:
  {"token": "hf_secret",
   "repos": {"org/name": {"private": false, "page_size": 100,
                          "revisions": [{"refs": ["main"], "tags": ["v1"],
                                         "files": {"a.gguf": "/path/on/disk", "README.md": {"text": "..."}}}]}}}
Commits are derived from the file contents. Files ending in .gguf/.safetensors/.bin are LFS.

usage: hub_fixture_server.py CONFIG.json  (prints "PORT CDN_PORT" on stdout when ready)
"""

import hashlib
import json
import os
import sys
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LFS_SUFFIXES = (".gguf", ".safetensors", ".bin")


def git_oid(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


class File:
    def __init__(self, path, source):
        self.path = path
        if isinstance(source, dict):
            self.data = source["text"].encode()
            self.disk = None
        else:
            self.disk = source
            self.data = None
        self.lfs = path.endswith(LFS_SUFFIXES)
        h = hashlib.sha256()
        size = 0
        for chunk in self.chunks(0, None):
            h.update(chunk)
            size += len(chunk)
        self.size = size
        self.sha256 = h.hexdigest()
        if self.lfs:
            pointer = f"version https://git-lfs.github.com/spec/v1\noid sha256:{self.sha256}\nsize {size}\n"
            self.oid = git_oid(pointer.encode())
        else:
            self.oid = git_oid(self.read_all())

    def read_all(self):
        return b"".join(self.chunks(0, None))

    def chunks(self, start, end):
        """The bytes [start, end) in pieces."""
        if self.data is not None:
            yield self.data[start:end]
            return
        with open(self.disk, "rb") as f:
            f.seek(start)
            left = None if end is None else end - start
            while left is None or left > 0:
                n = 1 << 20 if left is None else min(1 << 20, left)
                b = f.read(n)
                if not b:
                    return
                if left is not None:
                    left -= len(b)
                yield b


class Revision:
    def __init__(self, spec, parent):
        self.files = {p: File(p, s) for p, s in sorted(spec["files"].items())}
        h = hashlib.sha1((parent or "").encode())
        for f in self.files.values():
            h.update(f"{f.path}\0{f.oid}\n".encode())
        self.commit = h.hexdigest()
        self.refs = spec.get("refs", [])
        self.tags = spec.get("tags", [])


class Repo:
    def __init__(self, name, spec):
        self.name = name
        self.private = spec.get("private", False)
        self.page_size = spec.get("page_size", 1000)
        self.revisions = []
        parent = None
        for r in spec["revisions"]:
            rev = Revision(r, parent)
            parent = rev.commit
            self.revisions.append(rev)

    def find(self, rev):
        for r in self.revisions:
            if rev == r.commit or rev in r.refs or rev in r.tags:
                return r
        return None


class State:
    def __init__(self, config):
        self.token = config.get("token")
        self.repos = {n: Repo(n, s) for n, s in config["repos"].items()}
        self.by_sha = {}
        for repo in self.repos.values():
            for rev in repo.revisions:
                for f in rev.files.values():
                    self.by_sha[f.sha256] = f
        self.faults = {}
        self.log = []
        self.lock = threading.Lock()
        self.cdn_port = None


STATE: State = None  # set in main


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    # -- helpers -------------------------------------------------------------------------
    def send_json(self, obj, status=200, headers=None):
        body = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def error(self, status, message, code=None):
        headers = {"X-Error-Message": message}
        if code:
            headers["X-Error-Code"] = code
        self.send_json({"error": message}, status, headers)

    def authorized(self, repo):
        if not repo.private:
            return True
        return self.headers.get("Authorization") == f"Bearer {STATE.token}"

    def repo_and_rest(self, parts):
        if len(parts) < 2:
            return None, None
        name = f"{parts[0]}/{parts[1]}"
        return STATE.repos.get(name), parts[2:]

    # -- routes --------------------------------------------------------------------------
    def do_HEAD(self):
        self.route()

    def do_GET(self):
        self.route()

    def do_POST(self):
        n = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(n) or b"{}")
        path = urllib.parse.urlsplit(self.path).path
        with STATE.lock:
            if path == "/_fault":
                if body.get("clear"):
                    STATE.faults.clear()
                else:
                    STATE.faults[body["path"]] = body
                return self.send_json({"ok": True})
            if path == "/_log/clear":
                STATE.log.clear()
                return self.send_json({"ok": True})
        self.error(404, "no such route")

    def route(self):
        url = urllib.parse.urlsplit(self.path)
        query = urllib.parse.parse_qs(url.query)
        raw_parts = url.path.strip("/").split("/")
        parts = [urllib.parse.unquote(p) for p in raw_parts]
        if url.path == "/_log":
            with STATE.lock:
                return self.send_json(STATE.log)
        with STATE.lock:
            STATE.log.append([self.command, url.path, self.headers.get("Range")])
        if self.server.is_cdn:
            if len(parts) == 2 and parts[0] == "cdn" and parts[1] in STATE.by_sha:
                return self.send_file(STATE.by_sha[parts[1]], None)
            return self.error(404, "no such object")
        if parts[:2] == ["api", "models"]:
            repo, rest = self.repo_and_rest(parts[2:])
            if repo is None or not self.authorized(repo):
                return self.error(401, "Repository Not Found", "RepoNotFound")
            if rest == ["refs"]:
                return self.send_json(self.refs(repo))
            if len(rest) >= 2 and rest[0] in ("revision", "tree"):
                # A revision may hold '/', sent as %2F: it is one raw segment.
                rev_raw = raw_parts[2 + 2 + 1]
                rev = repo.find(urllib.parse.unquote(rev_raw))
                if rev is None:
                    return self.error(404, "Revision Not Found", "RevisionNotFound")
                if rest[0] == "revision":
                    return self.send_json(self.info(repo, rev))
                prefix = "/".join(parts[2 + 2 + 2 :])
                recursive = query.get("recursive", ["false"])[0] in ("true", "1", "True")
                return self.tree(repo, rev, prefix, recursive, int(query.get("cursor", ["0"])[0]))
            return self.error(404, "no such route")
        repo, rest = self.repo_and_rest(parts)
        if repo is not None and len(rest) >= 3 and rest[0] == "resolve":
            if not self.authorized(repo):
                return self.error(401, "Repository Not Found", "RepoNotFound")
            rev = repo.find(rest[1])
            if rev is None:
                return self.error(404, "Revision Not Found", "RevisionNotFound")
            f = rev.files.get("/".join(rest[2:]))
            if f is None:
                return self.error(404, "Entry Not Found", "EntryNotFound")
            if f.lfs:
                self.send_response(302)
                self.send_header("Location", f"http://127.0.0.1:{STATE.cdn_port}/cdn/{f.sha256}")
                self.send_header("X-Repo-Commit", rev.commit)
                self.send_header("X-Linked-Etag", f'"{f.sha256}"')
                self.send_header("X-Linked-Size", str(f.size))
                self.send_header("ETag", f'"{f.oid}"')
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            return self.send_file(f, rev.commit)
        self.error(404, "no such route")

    def refs(self, repo):
        branches, tags = [], []
        for rev in repo.revisions:
            for b in rev.refs:
                branches.append({"name": b, "ref": f"refs/heads/{b}", "targetCommit": rev.commit})
            for t in rev.tags:
                tags.append({"name": t, "ref": f"refs/tags/{t}", "targetCommit": rev.commit})
        return {"branches": branches, "tags": tags, "converts": []}

    def entry(self, f):
        e = {"type": "file", "oid": f.oid, "size": f.size, "path": f.path}
        if f.lfs:
            e["lfs"] = {"oid": f.sha256, "size": f.size, "pointerSize": 134}
        return e

    def info(self, repo, rev):
        siblings = []
        for f in rev.files.values():
            s = {"rfilename": f.path, "size": f.size, "blobId": f.oid}
            if f.lfs:
                s["lfs"] = {"sha256": f.sha256, "size": f.size, "pointerSize": 134}
            siblings.append(s)
        return {
            "_id": repo.name,
            "id": repo.name,
            "modelId": repo.name,
            "sha": rev.commit,
            "private": repo.private,
            "gated": False,
            "disabled": False,
            "tags": ["gguf"],
            "siblings": siblings,
        }

    def tree(self, repo, rev, prefix, recursive, cursor):
        items = []
        dirs = set()
        for f in rev.files.values():
            if prefix and not f.path.startswith(prefix + "/"):
                continue
            rel = f.path[len(prefix) + 1 :] if prefix else f.path
            if "/" in rel and not recursive:
                d = (prefix + "/" if prefix else "") + rel.split("/")[0]
                if d not in dirs:
                    dirs.add(d)
                    items.append({"type": "directory", "oid": "0" * 40, "size": 0, "path": d})
                continue
            if recursive:
                segs = f.path.split("/")[:-1]
                for i in range(1, len(segs) + 1):
                    d = "/".join(segs[:i])
                    if d not in dirs and (not prefix or d.startswith(prefix + "/")):
                        dirs.add(d)
                        items.append({"type": "directory", "oid": "0" * 40, "size": 0, "path": d})
            items.append(self.entry(f))
        page = items[cursor : cursor + repo.page_size]
        headers = {}
        if cursor + repo.page_size < len(items):
            base = f"http://127.0.0.1:{self.server.server_port}{urllib.parse.urlsplit(self.path).path}"
            q = urllib.parse.urlencode({"recursive": str(recursive).lower(), "cursor": cursor + repo.page_size})
            headers["Link"] = f'<{base}?{q}>; rel="next"'
        return self.send_json(page, headers=headers)

    def send_file(self, f, commit):
        with STATE.lock:
            fault = STATE.faults.get(f.path)
            cut = None
            corrupt = False
            if fault:
                corrupt = bool(fault.get("corrupt"))
                if fault.get("cut_after") is not None and fault.get("times", 1) > 0 and self.command == "GET":
                    cut = fault["cut_after"]
                    fault["times"] = fault.get("times", 1) - 1
        start, end = 0, f.size
        rng = self.headers.get("Range")
        status = 200
        if rng and rng.startswith("bytes="):
            a, _, b = rng[6:].partition("-")
            start = int(a)
            end = int(b) + 1 if b else f.size
            if start >= f.size:
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{f.size}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            status = 206
        self.send_response(status)
        self.send_header("Content-Length", str(end - start))
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("ETag", f'"{f.sha256 if f.lfs else f.oid}"')
        self.send_header("Content-Type", "application/octet-stream")
        if commit:
            self.send_header("X-Repo-Commit", commit)
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{end - 1}/{f.size}")
        self.end_headers()
        if self.command == "HEAD":
            return
        pos = start
        flip = f.size // 2
        for chunk in f.chunks(start, end):
            if corrupt and pos <= flip < pos + len(chunk):
                b = bytearray(chunk)
                b[flip - pos] ^= 0xFF
                chunk = bytes(b)
            if cut is not None and pos + len(chunk) > cut:
                self.wfile.write(chunk[: max(0, cut - pos)])
                self.wfile.flush()
                self.close_connection = True
                self.connection.shutdown(2)
                return
            self.wfile.write(chunk)
            pos += len(chunk)


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, is_cdn):
        super().__init__(("127.0.0.1", 0), Handler)
        self.is_cdn = is_cdn


def main():
    global STATE
    with open(sys.argv[1]) as f:
        STATE = State(json.load(f))
    api = Server(False)
    cdn = Server(True)
    STATE.cdn_port = cdn.server_port
    threading.Thread(target=cdn.serve_forever, daemon=True).start()
    print(api.server_port, cdn.server_port, flush=True)
    try:
        api.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
