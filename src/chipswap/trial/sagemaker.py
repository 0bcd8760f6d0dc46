"""Create the trial kit's SageMaker alternative (model, endpoint configuration, endpoint) through boto3.

    python -m chipswap.trial.sagemaker deploy/sagemaker.json --role-arn ARN [--region R] [--dry-run]

The kit's deploy/sagemaker.json holds the three request bodies (chipswap.trial.fleet.sagemaker_requests);
this module only adds the execution role and sends them, in order, or prints them with --dry-run (no AWS
call, no credentials needed). It is the only part of chipswap.trial that talks to AWS; it may not change the
requests' content. Bad input: one line, exit 2; an AWS error: one line, exit 1.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

from chipswap.errors import ChipswapError
from chipswap.textsafe import one_line

ROLE_ARN = re.compile(r"^arn:aws[a-z-]*:iam::\d{12}:role/[\w+=,.@/-]{1,512}$")
OPERATIONS = (
    ("create_model", "model", "ModelArn"),
    ("create_endpoint_config", "endpoint_config", "EndpointConfigArn"),
    ("create_endpoint", "endpoint", "EndpointArn"),
)


def read_requests(path: Path) -> dict[str, Any]:
    from chipswap.datafile import read_json

    data = read_json(path, "SageMaker requests")
    if not isinstance(data, dict) or any(not isinstance(data.get(k), dict) for _, k, _ in OPERATIONS):
        raise ChipswapError(
            f"{path}: expected the keys model, endpoint_config and endpoint (written by chipswap trial)"
        )
    return data


def calls(requests: dict[str, Any], role_arn: str) -> list[tuple[str, dict[str, Any], str]]:
    """(boto3 operation, request body, ARN key of the answer), in the order they must run."""
    if not ROLE_ARN.match(role_arn):
        raise ChipswapError(
            f"--role-arn {role_arn!r} is not an IAM role ARN; pass arn:aws:iam::ACCOUNT:role/NAME (a role "
            "SageMaker can assume)"
        )
    out = []
    for op, key, arn in OPERATIONS:
        body = dict(requests[key])
        if key == "model":
            body["ExecutionRoleArn"] = role_arn
        out.append((op, body, arn))
    return out


def deploy(
    requests: dict[str, Any], *, role_arn: str, client: Any = None, dry_run: bool = False
) -> list[str]:
    """Send (or, dry run, print) the three requests; one line per call."""
    lines = []
    for op, body, arn_key in calls(requests, role_arn):
        if dry_run:
            lines.append(f"dry run: sagemaker.{op} {json.dumps(body, sort_keys=True)}")
            continue
        answer = getattr(client, op)(**body)
        lines.append(f"sagemaker.{op}: {answer.get(arn_key, '?')}")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m chipswap.trial.sagemaker", description=__doc__.splitlines()[0]
    )
    ap.add_argument("requests", type=Path, help="deploy/sagemaker.json from a chipswap trial kit")
    ap.add_argument("--role-arn", required=True, help="IAM role SageMaker assumes to pull the image")
    ap.add_argument("--region", default="us-east-1")
    ap.add_argument("--endpoint-url", default=None, help="another SageMaker API endpoint (tests: moto)")
    ap.add_argument("--dry-run", action="store_true", help="print the requests; call nothing")
    args = ap.parse_args(argv)
    try:
        requests = read_requests(args.requests)
        client = None
        if not args.dry_run:
            import boto3

            client = boto3.client("sagemaker", region_name=args.region, endpoint_url=args.endpoint_url)
        for line in deploy(requests, role_arn=args.role_arn, client=client, dry_run=args.dry_run):
            print(line)
    except ChipswapError as exc:
        sys.stderr.write(f"chipswap: error: {one_line(str(exc), 2000)}\n")
        return 2
    except Exception as exc:  # botocore ClientError / NoCredentialsError / EndpointConnectionError
        sys.stderr.write(f"chipswap: error: SageMaker call failed: {one_line(str(exc), 2000)}\n")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
