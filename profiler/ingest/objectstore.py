"""Where a store's files live: a local folder or an S3 bucket, behind one small interface.

Both hold whole objects under '/'-separated keys relative to the store's root, and offer what the
store's commit protocol needs and nothing more: read, list, put (atomic replace), put-if-absent
(the commit point: S3's `If-None-Match: *`, a hard link locally), copy and delete.

S3 goes through fsspec's s3fs (the `s3` extra). The endpoint and credentials come from the
standard AWS environment: AWS_ENDPOINT_URL (or AWS_ENDPOINT_URL_S3) for an S3-compatible server,
AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (or any other source botocore knows), AWS_REGION.
Every failure of the service becomes one BadInput line that names the store and what to check.
"""
from __future__ import annotations

import contextlib
import datetime as dt
import os
import uuid
from dataclasses import dataclass
from pathlib import Path

from profiler.errors import BadInput

S3_SCHEME = "s3://"


@dataclass(frozen=True)
class Entry:
    key: str
    size_bytes: int
    modified: dt.datetime  # UTC


def is_url(spec) -> bool:
    return "://" in str(spec)


def open_objects(spec) -> "LocalObjects | S3Objects":
    """`spec` a folder path or an s3://bucket/prefix URL."""
    text = str(spec)
    if text.startswith(S3_SCHEME):
        return S3Objects(text)
    if is_url(text):
        raise BadInput(f"--store {text}: only folders and s3:// URLs are stores (an S3-compatible "
                       "server via AWS_ENDPOINT_URL)")
    return LocalObjects(Path(text))


class LocalObjects:
    """A folder. Writes go to a hidden temporary beside the target, then rename or link into place."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self.url = str(self.root)

    def _path(self, key: str) -> Path:
        return self.root / key

    def _temporary(self, target: Path) -> Path:
        target.parent.mkdir(parents=True, exist_ok=True)
        return target.with_name(f".tmp-{uuid.uuid4().hex}-{target.name}")

    def read(self, key: str) -> bytes:
        return self._path(key).read_bytes()

    def exists(self, key: str) -> bool:
        return self._path(key).is_file()

    def put(self, key: str, data: bytes) -> None:
        target = self._path(key)
        tmp = self._temporary(target)
        tmp.write_bytes(data)
        os.replace(tmp, target)

    def put_if_absent(self, key: str, data: bytes) -> bool:
        """Create `key` whole, or return False when it exists (a hard link fails on an existing name)."""
        target = self._path(key)
        tmp = self._temporary(target)
        try:
            tmp.write_bytes(data)
            os.link(tmp, target)
            return True
        except FileExistsError:
            return False
        finally:
            tmp.unlink(missing_ok=True)

    def upload(self, key: str, source: Path) -> None:
        target = self._path(key)
        tmp = self._temporary(target)
        with open(source, "rb") as src, open(tmp, "wb") as dst:
            while block := src.read(1 << 22):
                dst.write(block)
        os.replace(tmp, target)

    def copy(self, source_key: str, key: str) -> None:
        self.upload(key, self._path(source_key))

    def list(self, prefix: str = "", start_after: str | None = None,
             limit: int | None = None) -> list[Entry]:
        """Objects whose key starts with `prefix` (hidden temporaries skipped), sorted by key."""
        base = self._path(prefix.rsplit("/", 1)[0]) if "/" in prefix else self.root
        if not base.is_dir():
            return []
        entries = []
        for path in base.rglob("*"):
            key = path.relative_to(self.root).as_posix()
            if (not key.startswith(prefix) or path.name.startswith(".tmp-") or not path.is_file()
                    or (start_after is not None and key <= start_after)):
                continue
            stat = path.stat()
            entries.append(Entry(key, stat.st_size,
                                 dt.datetime.fromtimestamp(stat.st_mtime, dt.timezone.utc)))
        return sorted(entries, key=lambda e: e.key)[:limit]

    def delete(self, keys) -> None:
        """Remove the files, and the folders they leave empty (a prefix has no folder on S3)."""
        for key in keys:
            path = self._path(key)
            path.unlink(missing_ok=True)
            for parent in path.parents:
                if parent == self.root or not parent.is_relative_to(self.root):
                    break
                try:
                    parent.rmdir()
                except OSError:  # not empty
                    break


class S3Objects:
    """s3://bucket/prefix through s3fs. Listing and reads are uncached: S3 is strongly consistent
    and another writer may have committed since the last call."""

    def __init__(self, url: str):
        rest = url[len(S3_SCHEME):].strip("/")
        self.bucket, _, prefix = rest.partition("/")
        if not self.bucket:
            raise BadInput(f"--store {url}: no bucket (expected s3://BUCKET/PREFIX)")
        self.prefix = prefix.strip("/")
        self.url = f"{S3_SCHEME}{self.bucket}" + (f"/{self.prefix}" if self.prefix else "")
        try:
            import s3fs
        except ImportError:
            raise BadInput(f"--store {self.url}: S3 stores need s3fs: pip install 'smlens[s3]'") from None
        endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
        region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
        client_kwargs = {"region_name": region} if region else {}
        if endpoint:
            client_kwargs["endpoint_url"] = endpoint
        # few retries and short connect timeouts: a wrong endpoint should say so in seconds
        self.fs = s3fs.S3FileSystem(skip_instance_cache=True, use_listings_cache=False,
                                    client_kwargs=client_kwargs,
                                    config_kwargs={"connect_timeout": 5, "read_timeout": 60,
                                                   "retries": {"max_attempts": 2}})
        self.fs.retries = 2  # s3fs's own retry loop, on top of botocore's
        self.endpoint = endpoint

    def _path(self, key: str) -> str:
        return "/".join(p for p in (self.bucket, self.prefix, key) if p)

    def _key(self, path: str) -> str:
        head = "/".join(p for p in (self.bucket, self.prefix) if p) + "/"
        return path[len(head):] if path.startswith(head) else path

    @contextlib.contextmanager
    def _errors(self, key: str = ""):
        """The service's failures as one line that says what to check."""
        where = f"{self.url}/{key}" if key else self.url
        try:
            yield
        except (FileNotFoundError, BadInput):
            raise
        except PermissionError as err:
            raise BadInput(f"{where}: access denied ({_reason(err)}); check AWS_ACCESS_KEY_ID, "
                           "AWS_SECRET_ACCESS_KEY and the bucket's policy") from None
        except Exception as err:  # botocore / aiohttp errors have no common base worth naming
            if _unreachable(err):  # no answer at all: the bucket and credentials are not the question
                raise BadInput(f"{where}: cannot reach the S3 endpoint {self.endpoint or 'of AWS'} "
                               f"({_reason(err)}); check AWS_ENDPOINT_URL and that the server is "
                               "running") from None
            raise BadInput(f"{where}: {_reason(err)}; check AWS_ENDPOINT_URL"
                           f"{' (' + self.endpoint + ')' if self.endpoint else ''}, the bucket and "
                           "the credentials") from None

    def check_bucket(self) -> None:
        """Fail with one line when the bucket is missing or the credentials are refused."""
        with self._errors():
            try:
                self.fs.call_s3("list_objects_v2", Bucket=self.bucket, MaxKeys=1)
            except FileNotFoundError:
                raise BadInput(f"{self.url}: no bucket {self.bucket!r} at "
                               f"{self.endpoint or 'AWS S3'}; create it first or fix --store") from None

    def read(self, key: str) -> bytes:
        with self._errors(key):
            return self.fs.cat_file(self._path(key))

    def exists(self, key: str) -> bool:
        with self._errors(key):
            return self.fs.exists(self._path(key))

    def put(self, key: str, data: bytes) -> None:
        with self._errors(key):
            self.fs.pipe_file(self._path(key), data)

    def put_if_absent(self, key: str, data: bytes) -> bool:
        with self._errors(key):
            try:
                self.fs.pipe_file(self._path(key), data, mode="create")
                return True
            except FileExistsError:  # s3fs's name for 412 Precondition Failed
                return False

    def upload(self, key: str, source: Path) -> None:
        """One object, visible only once whole (a multipart upload is invisible until completed)."""
        with self._errors(key):
            self.fs.put_file(str(source), self._path(key))

    def copy(self, source_key: str, key: str) -> None:
        with self._errors(key):
            self.fs.copy(self._path(source_key), self._path(key))

    def list(self, prefix: str = "", start_after: str | None = None,
             limit: int | None = None) -> list[Entry]:
        """Objects whose key starts with `prefix`, sorted by key; `start_after` lets S3 skip
        what a reader already has (one request per 1,000 keys listed)."""
        full = self._path(prefix) if prefix else self._path("") + "/"
        kwargs = {"Bucket": self.bucket, "Prefix": full[len(self.bucket) + 1:]}
        if limit is not None:
            kwargs["MaxKeys"] = limit
        if start_after is not None:
            kwargs["StartAfter"] = self._path(start_after)[len(self.bucket) + 1:]
        entries = []
        with self._errors(prefix):
            try:
                while True:
                    page = self.fs.call_s3("list_objects_v2", **kwargs)
                    for obj in page.get("Contents", []):
                        entries.append(Entry(self._key(f"{self.bucket}/{obj['Key']}"), obj["Size"],
                                             obj["LastModified"].astimezone(dt.timezone.utc)))
                    if not page.get("IsTruncated") or (limit is not None and len(entries) >= limit):
                        break
                    kwargs["ContinuationToken"] = page["NextContinuationToken"]
            except FileNotFoundError:
                self.check_bucket()
                raise
        return entries

    def delete(self, keys) -> None:
        paths = [self._path(k) for k in keys]
        if paths:
            with self._errors():
                self.fs.rm(paths)


def _unreachable(err: Exception) -> bool:
    """A connection refused, unroutable or timed out, as botocore or the OS reports it."""
    from botocore.exceptions import ConnectionError as NoConnection

    return isinstance(err, (NoConnection, ConnectionError, TimeoutError))


def _reason(err: Exception) -> str:
    text = " ".join(str(err).split()) or type(err).__name__
    return text if len(text) <= 160 else text[:157] + "..."
