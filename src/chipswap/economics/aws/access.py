"""AwsAccess: boto3 clients with the standard credential chain, a read-only guard, retries with backoff, and
one place that sorts every AWS failure into what the user is told.

May not write anything, call any AWS operation that is not Describe* / Get* / List*, or read credentials
itself (boto3's chain does: environment, profile, SSO, container and instance role). Never imported by the
core.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from chipswap.errors import ChipswapError

# Only reads. Any other operation is refused before a client is even asked (a test walks every call site).
READ_ONLY_PREFIXES = ("Describe", "Get", "List")

# Error codes (ClientError "Code") sorted by what they mean for the user. Tables, not if-chains.
CREDENTIAL_CODES = frozenset(
    {
        "ExpiredToken",
        "ExpiredTokenException",
        "RequestExpired",
        "InvalidClientTokenId",
        "UnrecognizedClientException",
        "SignatureDoesNotMatch",
        "IncompleteSignature",
        "InvalidToken",
        "MissingAuthenticationToken",
        "InvalidAccessKeyId",
    }
)
DENIED_CODES = frozenset(
    {"AccessDenied", "AccessDeniedException", "UnauthorizedOperation", "UnauthorizedException"}
)
THROTTLE_CODES = frozenset(
    {
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestLimitExceeded",
        "TooManyRequestsException",
        "RequestThrottled",
        "RequestThrottledException",
        "SlowDown",
        "EC2ThrottledException",
    }
)
# a region the account has not opted into answers OptInRequired (or AuthFailure once the credentials are known
# to be good)
NOT_ENABLED_CODES = frozenset({"OptInRequired", "AuthFailure"})
INVALID_CODES = frozenset(
    {"InvalidInstanceType", "InvalidParameterValue", "InvalidParameterCombination", "ValidationException"}
)

# botocore exception class names that mean "no usable credentials" / "no network": the whole command falls
# back to the shipped snapshot with one note
_CREDENTIAL_ERRORS = {
    "NoCredentialsError": "no AWS credentials found (environment, profile, SSO or instance role)",
    "PartialCredentialsError": "the AWS credentials are incomplete",
    "CredentialRetrievalError": "the AWS credentials could not be retrieved",
    "TokenRetrievalError": "the AWS SSO token has expired; run `aws sso login`",
    "SSOTokenLoadError": "the AWS SSO token could not be loaded; run `aws sso login`",
    "UnauthorizedSSOTokenError": "the AWS SSO session has expired; run `aws sso login`",
    "ProfileNotFound": "the AWS profile named in AWS_PROFILE does not exist",
    "NoRegionError": "no AWS region configured",
    "InvalidConfigError": "the AWS config file is not valid",
}
_NETWORK_ERRORS = frozenset(
    {
        "EndpointConnectionError",
        "ConnectTimeoutError",
        "ReadTimeoutError",
        "ConnectionClosedError",
        "ProxyConnectionError",
        "SSLError",
        "HTTPClientError",
    }
)

DEFAULT_MAX_ATTEMPTS = 4  # botocore "standard" retry mode: exponential backoff with jitter between attempts

ProblemKind = Literal["denied", "throttled", "not-enabled", "invalid", "error"]


class AwsOffline(Exception):
    """AWS cannot be used at all (no or expired credentials, no network): fall back to the snapshot."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = " ".join(reason.split())


class AwsUnavailableError(ChipswapError):
    """A command that needs AWS (catalog refresh) could not use it: one line, nothing written, exit 3."""

    exit_code = 3


class ApiProblem(Exception):
    """One API call failed in a way that leaves one field unknown (the rest of the answer still stands)."""

    def __init__(self, api: str, kind: ProblemKind, code: str, message: str, attempts: int = 1) -> None:
        super().__init__(api, kind, code)
        self.api = api  # "ec2:DescribeInstanceTypeOfferings"
        self.kind = kind
        self.code = code
        self.message = message
        self.attempts = attempts

    def __str__(self) -> str:
        return self.note

    @property
    def note(self) -> str:
        """What the user reads in place of the value."""
        if self.kind == "denied":
            return f"access denied to {self.api} ({self.code}); allow it in the IAM policy to see this"
        if self.kind == "throttled":
            return (
                f"AWS throttled {self.api} ({self.code}) after {self.attempts} tries with backoff; "
                "try again in a minute"
            )
        if self.kind == "not-enabled":
            return (
                f"region not enabled for this account ({self.code}); enable it in the AWS console to check it"
            )
        if self.kind == "invalid":
            return f"AWS refused the request to {self.api} ({self.code}): {self.message}"
        return f"{self.api} failed ({self.code}): {self.message}"


ClientFactory = Callable[[str, str, str], Any]  # (service, region, operation) -> botocore client


def _is_read_only(operation: str) -> bool:
    return operation.startswith(READ_ONLY_PREFIXES)


class AwsAccess:
    """Read-only AWS calls through boto3's standard credential chain.

    `client_factory(service, region, operation)` replaces how clients are made (tests point EC2 at a moto
    server and give the few APIs moto lacks a botocore Stubber); by default one boto3 client per
    (service, region) with standard retries and short timeouts.
    """

    def __init__(
        self,
        session: Any = None,
        *,
        client_factory: ClientFactory | None = None,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        connect_timeout_s: float = 5.0,
        read_timeout_s: float = 30.0,
    ) -> None:
        self._session = session
        self._factory = client_factory
        self.max_attempts = max_attempts
        self._timeouts = (connect_timeout_s, read_timeout_s)
        self._clients: dict[tuple[str, str, int], Any] = {}
        self.account: str | None = None

    # -- clients ---------------------------------------------------------------------------------------------
    def session(self) -> Any:
        if self._session is None:
            import boto3

            try:
                self._session = boto3.Session()
            except Exception as exc:  # ProfileNotFound and friends surface here
                raise AwsOffline(_offline_reason(exc)) from None
        return self._session

    def client(self, service: str, region: str, operation: str, *, attempts: int | None = None) -> Any:
        if self._factory is not None:
            return self._factory(service, region, operation)
        tries = attempts or self.max_attempts
        key = (service, region, tries)
        if key not in self._clients:
            from botocore.config import Config

            config = Config(
                retries={"mode": "standard", "total_max_attempts": tries},  # tries include the first
                connect_timeout=self._timeouts[0],
                read_timeout=self._timeouts[1],
                user_agent_extra="chipswap",
            )
            try:
                self._clients[key] = self.session().client(service, region_name=region, config=config)
            except AwsOffline:
                raise
            except Exception as exc:
                raise AwsOffline(_offline_reason(exc)) from None
        return self._clients[key]

    # -- calls -----------------------------------------------------------------------------------------------
    def call(self, service: str, region: str, operation: str, **params: Any) -> dict[str, Any]:
        """One read-only call; AwsOffline for credential / network trouble, ApiProblem for the rest."""
        return self._call(service, region, operation, None, params)

    def _call(
        self, service: str, region: str, operation: str, attempts: int | None, params: dict[str, Any]
    ) -> dict[str, Any]:
        if not _is_read_only(operation):
            raise PermissionError(f"chipswap makes read-only AWS calls only; refused {service}:{operation}")
        from botocore import xform_name

        client = self.client(service, region, operation, attempts=attempts)
        method = getattr(client, xform_name(operation))
        try:
            result = method(**params)
        except Exception as exc:
            raise classify(
                exc, f"{service}:{operation}", credentials_checked=self.account is not None
            ) from None
        return dict(result)

    def pages(
        self, service: str, region: str, operation: str, result_key: str, *, limit: int = 50, **params: Any
    ) -> list[Any]:
        """Every item under `result_key` across NextToken pages (at most `limit` pages, a bound)."""
        items: list[Any] = []
        token: str | None = None
        for _ in range(limit):
            page = self.call(service, region, operation, **params, **({"NextToken": token} if token else {}))
            items.extend(page.get(result_key) or [])
            token = page.get("NextToken") or None
            if not token:
                return items
        # a partial answer would be read as complete (e.g. vCPUs in use undercounted): say unknown instead
        raise ApiProblem(f"{service}:{operation}", "error", "TooManyPages", f"more than {limit} pages")

    def probe(self, region: str) -> str:
        """Check the credentials once (STS GetCallerIdentity, one try): the account id, or AwsOffline."""
        try:
            session = self.session()
            if self._factory is None and session.get_credentials() is None:
                raise AwsOffline(_CREDENTIAL_ERRORS["NoCredentialsError"])
        except AwsOffline:
            raise
        except Exception as exc:
            raise AwsOffline(_offline_reason(exc)) from None
        try:
            who = self._call("sts", region, "GetCallerIdentity", 1, {})
        except ApiProblem as problem:
            if problem.kind == "denied":  # the credentials work; STS is just not allowed
                self.account = "unknown"
                return self.account
            raise AwsOffline(
                f"AWS refused the credentials check ({problem.code}): {problem.message}"
            ) from None
        self.account = str(who.get("Account") or "unknown")
        return self.account


def _offline_reason(exc: BaseException) -> str:
    name = type(exc).__name__
    if name in _CREDENTIAL_ERRORS:
        return _CREDENTIAL_ERRORS[name]
    if name in _NETWORK_ERRORS:
        return f"AWS could not be reached ({name}); no network?"
    return f"AWS could not be used ({name}: {' '.join(str(exc).split())[:200]})"


def classify(exc: BaseException, api: str, *, credentials_checked: bool) -> Exception:
    """Sort one failure: AwsOffline (whole command goes offline) or ApiProblem (one field unknown)."""
    from botocore.exceptions import ClientError

    if isinstance(exc, ClientError):
        err = exc.response.get("Error", {}) or {}
        code = str(err.get("Code") or "Unknown")
        message = " ".join(str(err.get("Message") or "").split())[:300]
        attempts = int((exc.response.get("ResponseMetadata") or {}).get("RetryAttempts", 0)) + 1
        if code in CREDENTIAL_CODES or (code == "AuthFailure" and not credentials_checked):
            return AwsOffline(f"AWS rejected the credentials ({code}); refresh them (e.g. `aws sso login`)")
        if code in DENIED_CODES:
            return ApiProblem(api, "denied", code, message)
        if code in THROTTLE_CODES:
            return ApiProblem(api, "throttled", code, message, attempts)
        if code in NOT_ENABLED_CODES:
            return ApiProblem(api, "not-enabled", code, message)
        if code in INVALID_CODES:
            return ApiProblem(api, "invalid", code, message)
        return ApiProblem(api, "error", code, message)
    name = type(exc).__name__
    if name in _CREDENTIAL_ERRORS or name in _NETWORK_ERRORS:
        return AwsOffline(_offline_reason(exc))
    if isinstance(exc, PermissionError):
        return exc
    return ApiProblem(api, "error", name, " ".join(str(exc).split())[:300])


def access_from_environment(no_aws: bool) -> AwsAccess | None:
    """The access the commands use: None with --no-aws, else boto3's standard chain. Tests replace this."""
    if no_aws:
        return None
    return AwsAccess()
