"""Test helpers for the AWS edge: no internet, fake credentials, a moto server on loopback (real HTTP, real
botocore parsing), botocore Stubbers (responses checked against the service model) for the APIs moto
lacks, and a tiny loopback server that answers with AWS error documents (throttling, expired credentials).

Nothing here can reach AWS: every socket to a non-loopback address is refused.
"""

from __future__ import annotations

import json
import socket
import threading
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs

import pytest

LOOPBACK = ("127.0.0.1", "::1", "localhost")
AWS_ENV = (
    "AWS_PROFILE",
    "AWS_DEFAULT_PROFILE",
    "AWS_SESSION_TOKEN",
    "AWS_SECURITY_TOKEN",
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_EC2",
    "AWS_ENDPOINT_URL_STS",
    "AWS_ENDPOINT_URL_PRICING",
    "AWS_ENDPOINT_URL_SERVICE_QUOTAS",
    "AWS_ROLE_ARN",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI",
)


def block_internet(monkeypatch: pytest.MonkeyPatch) -> None:
    """Refuse every connection and name lookup that is not loopback (so a test can never reach AWS)."""
    real_connect = socket.socket.connect
    real_getaddrinfo = socket.getaddrinfo

    def host_of(address: Any) -> str:
        return str(address[0]) if isinstance(address, tuple) else str(address)

    def guarded_connect(self: socket.socket, address: Any) -> Any:
        if self.family in (socket.AF_INET, socket.AF_INET6) and host_of(address) not in LOOPBACK:
            raise OSError(f"test blocked a connection to {address!r}")
        return real_connect(self, address)

    def guarded_getaddrinfo(host: Any, *args: Any, **kw: Any) -> Any:
        if host is not None and str(host) not in LOOPBACK:
            raise socket.gaierror(f"test blocked a name lookup of {host!r}")
        return real_getaddrinfo(host, *args, **kw)

    monkeypatch.setattr(socket.socket, "connect", guarded_connect)
    monkeypatch.setattr(socket, "getaddrinfo", guarded_getaddrinfo)


def fake_credentials(monkeypatch: pytest.MonkeyPatch, *, with_keys: bool = True) -> None:
    """Fake keys (or none), no profile or config files, no instance-metadata lookups."""
    for name in AWS_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/dev/null")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/dev/null")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    if with_keys:
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    else:
        monkeypatch.delenv("AWS_ACCESS_KEY_ID", raising=False)
        monkeypatch.delenv("AWS_SECRET_ACCESS_KEY", raising=False)


def offline_env(*, with_keys: bool = False, extra: dict[str, str] | None = None) -> dict[str, str]:
    """An environment for a chipswap subprocess: no real credentials, no metadata service, no config files."""
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(
        {
            "AWS_EC2_METADATA_DISABLED": "true",
            "AWS_CONFIG_FILE": "/dev/null",
            "AWS_SHARED_CREDENTIALS_FILE": "/dev/null",
            "AWS_DEFAULT_REGION": "us-east-1",
        }
    )
    if with_keys:
        env.update({"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"})
    env.update(extra or {})
    return env


# ------------------------------------------------------------------------------------------ moto server


class Moto:
    """A moto server in this process on a loopback port: real HTTP, real botocore parsing."""

    def __init__(self) -> None:
        import logging

        from moto.server import ThreadedMotoServer

        logging.getLogger("werkzeug").setLevel(logging.ERROR)
        self.server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self.server.start()
        host, port = self.server.get_host_and_port()
        self.url = f"http://{host}:{port}"
        # moto loads its offerings data on the first EC2 call (seconds): pay it once, here
        self.client("ec2", "us-east-1").describe_instance_type_offerings(MaxResults=5)

    def reset(self) -> None:
        """Forget everything (slow: moto rebuilds each region's backend on its next use)."""
        req = urllib.request.Request(f"{self.url}/moto-api/reset", method="POST", data=b"")
        urllib.request.urlopen(req, timeout=10).read()

    def terminate_all(self, regions: tuple[str, ...] = ("us-east-1", "us-west-1", "us-east-2")) -> None:
        """Stop every instance the tests started (cheap, unlike reset): usage counts start from zero again."""
        for region in regions:
            ec2 = self.client("ec2", region)
            ids = [
                i["InstanceId"]
                for r in ec2.describe_instances()["Reservations"]
                for i in r["Instances"]
                if i["State"]["Name"] != "terminated"
            ]
            if ids:
                ec2.terminate_instances(InstanceIds=ids)

    def client(self, service: str, region: str) -> Any:
        import boto3

        return boto3.client(
            service,
            region_name=region,
            endpoint_url=self.url,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )

    def stop(self) -> None:
        self.server.stop()


@contextmanager
def moto_server() -> Iterator[Moto]:
    server = Moto()
    try:
        yield server
    finally:
        server.stop()


def sealed(monkeypatch: pytest.MonkeyPatch) -> Stubs:
    """No internet, fake credentials, and an empty set of stubs: the start of every test against AWS."""
    block_internet(monkeypatch)
    fake_credentials(monkeypatch)
    return Stubs()


def run_instances(moto: Moto, region: str, instance_type: str, count: int, *, spot: bool = False) -> None:
    ec2 = moto.client("ec2", region)
    image = "ami-12c6146b"  # one of moto's built-in public images (listing them all is slow)
    extra: dict[str, Any] = {"InstanceMarketOptions": {"MarketType": "spot"}} if spot else {}
    ec2.run_instances(ImageId=image, MinCount=count, MaxCount=count, InstanceType=instance_type, **extra)


# ----------------------------------------------------------------------------------------- stubbed APIs


class Stubs:
    """botocore Stubbers for the APIs moto does not implement; every response is checked against the
    service model when it is added (Stubber validates it), every request against the model when it is made."""

    def __init__(self) -> None:
        self._stubs: dict[tuple[str, str, str], Any] = {}
        self.clients: dict[tuple[str, str, str], Any] = {}

    def _stubber(self, service: str, region: str, operation: str) -> Any:
        import boto3
        from botocore.stub import Stubber

        key = (service, region, operation)
        if key not in self._stubs:
            client = boto3.client(service, region_name=region, endpoint_url="http://127.0.0.1:9")
            stub = Stubber(client)
            stub.activate()
            self._stubs[key], self.clients[key] = stub, client
        return self._stubs[key]

    def respond(
        self, service: str, region: str, operation: str, response: dict, expected: dict | None = None
    ) -> None:
        from botocore import xform_name

        self._stubber(service, region, operation).add_response(xform_name(operation), response, expected)

    def fail(
        self, service: str, region: str, operation: str, code: str, message: str = "", status: int = 400
    ) -> None:
        from botocore import xform_name

        self._stubber(service, region, operation).add_client_error(
            xform_name(operation), service_error_code=code, service_message=message, http_status_code=status
        )

    def has(self, service: str, region: str, operation: str) -> bool:
        return (service, region, operation) in self._stubs

    def assert_all_used(self) -> None:
        for stub in self._stubs.values():
            stub.assert_no_pending_responses()


def routed_factory(moto: Moto, stubs: Stubs) -> Callable[[str, str, str], Any]:
    """(service, region, operation) -> the stubbed client for stubbed APIs, else a moto server client."""
    cache: dict[tuple[str, str], Any] = {}

    def make(service: str, region: str, operation: str) -> Any:
        if stubs.has(service, region, operation):
            return stubs.clients[(service, region, operation)]
        if (service, region) not in cache:
            cache[(service, region)] = moto.client(service, region)
        return cache[(service, region)]

    return make


def quota_response(code: str, name: str, value: float) -> dict:
    return {
        "Quota": {
            "ServiceCode": "ec2",
            "ServiceName": "Amazon Elastic Compute Cloud (Amazon EC2)",
            "QuotaCode": code,
            "QuotaName": name,
            "Value": value,
            "Unit": "None",
            "Adjustable": True,
            "GlobalQuota": False,
            "UsageMetric": {
                "MetricNamespace": "AWS/Usage",
                "MetricName": "ResourceCount",
                "MetricDimensions": {
                    "Class": "Trn/OnDemand",
                    "Resource": "vCPU",
                    "Service": "EC2",
                    "Type": "Resource",
                },
                "MetricStatisticRecommendation": "Maximum",
            },
        }
    }


# ------------------------------------------------------------------------------- loopback error server


class FakeAws:
    """A loopback HTTP server that answers AWS calls by action name with canned documents and counts them.

    `answers` maps an action (GetCallerIdentity, DescribeInstanceTypeOfferings, GetProducts, ...) to
    (HTTP status, body, content type); actions not listed get `default`.
    """

    def __init__(self, answers: dict[str, tuple[int, str, str]], default: tuple[int, str, str]) -> None:
        self.hits: Counter[str] = Counter()
        hits, table = self.hits, answers

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_a: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode(
                    "utf-8", "replace"
                )
                target = self.headers.get("X-Amz-Target") or ""
                action = target.rsplit(".", 1)[-1] if target else (parse_qs(body).get("Action") or ["?"])[0]
                hits[action] += 1
                status, text, ctype = table.get(action, default)
                data = text.encode()
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def ec2_error(code: str, message: str) -> str:
    return (
        f"<?xml version='1.0' encoding='UTF-8'?><Response><Errors><Error><Code>{code}</Code>"
        f"<Message>{message}</Message></Error></Errors><RequestID>r-1</RequestID></Response>"
    )


def sts_error(code: str, message: str) -> str:
    return (
        "<ErrorResponse xmlns='https://sts.amazonaws.com/doc/2011-06-15/'><Error><Type>Sender</Type>"
        f"<Code>{code}</Code><Message>{message}</Message></Error><RequestId>r-1</RequestId></ErrorResponse>"
    )


def json_error(code: str, message: str) -> str:
    return json.dumps({"__type": code, "message": message})


STS_IDENTITY = (
    "<GetCallerIdentityResponse xmlns='https://sts.amazonaws.com/doc/2011-06-15/'><GetCallerIdentityResult>"
    "<Arn>arn:aws:iam::111122223333:user/test</Arn><UserId>AIDATEST</UserId><Account>111122223333</Account>"
    "</GetCallerIdentityResult><ResponseMetadata><RequestId>r-1</RequestId></ResponseMetadata>"
    "</GetCallerIdentityResponse>"
)


@contextmanager
def fake_aws(answers: dict[str, tuple[int, str, str]], default: tuple[int, str, str]) -> Iterator[FakeAws]:
    server = FakeAws(answers, default)
    try:
        yield server
    finally:
        server.stop()


def closed_port() -> int:
    """A loopback port nothing listens on (connections are refused at once)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
