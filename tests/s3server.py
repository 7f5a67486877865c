"""A real S3 server on loopback for the tests and the benchmark: moto's server, in its own process,
serving one request at a time (so that its conditional writes are atomic, as S3's are).

The server checks credentials (moto's IAM access control, on from the first request on): a user is
made through moto's IAM before that, and its key is what `env()` hands out. It stops when its
parent closes the pipe to it (the test session ends or dies) or after `MAX_LIFETIME_S`, whichever
comes first, so a crashed run leaves no server behind.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from contextlib import contextmanager

MAX_LIFETIME_S = 3 * 3600
START_TIMEOUT_S = 60
# IAM calls made before access control starts: create user, attach policy, create key
SETUP_ACTIONS = 3

_SERVER = r"""
import sys, threading
from werkzeug.serving import make_server
from moto.moto_server.werkzeug_app import (DomainDispatcherApplication, MotoRequestHandler,
                                           create_backend_app)
app, one_at_a_time = DomainDispatcherApplication(create_backend_app), threading.Lock()

def serialized(environ, start_response):
    # moto checks If-None-Match, then writes: another request can fall between the two, where S3
    # does both at once (seen: two of 1,000 racing commits created the same log entry). One
    # request at a time makes its conditional writes as atomic as S3's.
    with one_at_a_time:
        return list(app(environ, start_response))

server = make_server("127.0.0.1", 0, serialized, threaded=True, request_handler=MotoRequestHandler)
threading.Thread(target=server.serve_forever, daemon=True).start()
print(server.server_port, flush=True)
# stop when the parent closes stdin, or after the lifetime cap
done = threading.Event()
threading.Thread(target=lambda: (sys.stdin.read(), done.set()), daemon=True).start()
done.wait(float(sys.argv[1]))
server.shutdown()
"""


class S3Server:
    def __init__(self, process: subprocess.Popen, port: int, access_key: str, secret_key: str):
        self.process, self.port = process, port
        self.endpoint = f"http://127.0.0.1:{port}"
        self.access_key, self.secret_key = access_key, secret_key

    def env(self, **overrides) -> dict[str, str]:
        """The AWS environment a client of this server needs (values may be overridden)."""
        values = {"AWS_ENDPOINT_URL": self.endpoint, "AWS_ACCESS_KEY_ID": self.access_key,
                  "AWS_SECRET_ACCESS_KEY": self.secret_key, "AWS_REGION": "us-east-1"}
        values.update(overrides)
        return values

    def client(self, **overrides):
        import boto3

        env = self.env(**overrides)
        return boto3.client("s3", endpoint_url=env["AWS_ENDPOINT_URL"],
                            aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
                            aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
                            region_name=env["AWS_REGION"])

    def make_bucket(self, name: str) -> str:
        self.client().create_bucket(Bucket=name)
        return name


@contextmanager
def s3_server():
    """Start moto on 127.0.0.1 (a free port), make an IAM user, yield the S3Server, stop it."""
    import boto3

    env = dict(os.environ, INITIAL_NO_AUTH_ACTION_COUNT=str(SETUP_ACTIONS), MOTO_ALLOW_NONEXISTENT_REGION="1")
    process = subprocess.Popen([sys.executable, "-c", _SERVER, str(MAX_LIFETIME_S)], env=env,
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL, text=True)
    try:
        line = _read_line(process, START_TIMEOUT_S)
        port = int(line)
        iam = boto3.client("iam", endpoint_url=f"http://127.0.0.1:{port}", region_name="us-east-1",
                           aws_access_key_id="setup", aws_secret_access_key="setup")
        iam.create_user(UserName="smlens-ci")
        iam.put_user_policy(UserName="smlens-ci", PolicyName="all", PolicyDocument=json.dumps(
            {"Version": "2012-10-17",
             "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}))
        key = iam.create_access_key(UserName="smlens-ci")["AccessKey"]
        yield S3Server(process, port, key["AccessKeyId"], key["SecretAccessKey"])
    finally:
        process.stdin.close()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _read_line(process: subprocess.Popen, timeout_s: float) -> str:
    """The server's first line (its port), or an error if it does not come in time."""
    import selectors

    selector = selectors.DefaultSelector()
    selector.register(process.stdout, selectors.EVENT_READ)
    if not selector.select(timeout_s):
        raise RuntimeError(f"moto server did not start within {timeout_s} s")
    line = process.stdout.readline().strip()
    if not line:
        raise RuntimeError(f"moto server exited ({process.poll()}) before it started")
    return line
