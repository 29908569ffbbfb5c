"""CPU per request for the gateway's OAuth token check with a warm key cache.

What every request to a gateway with ``gateway.auth`` pays before the MCP SDK sees it: the JWT
header, the key of its ``kid`` from the cache, the signature and claim checks (PyJWT), the
required scopes and the principal (:class:`anfitrion.mcp._gateway_auth.OAuthResource`).
The key set is fetched once (through an in-memory transport) before the timing starts.

    PYTHONPATH=src python benchmarks/token_validation.py [--calls 2000]

Prints the median CPU µs per request over 5 rounds, for RS256 (2048-bit) and ES256 tokens: a
token seen for the first time (signature and claims checked), the same token again (a client
sends its token on every request: the verified token is reused for up to 60 s, ``exp`` checked
each time), and the bare signature check (cryptography's verify, the floor).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

import anyio
import httpx2
import jwt
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from anfitrion.mcp._gateway_auth import OAuthResource
from anfitrion.mcp._oauth_settings import OAuthSettings

ISSUER = "https://idp.example"
RESOURCE = "https://gateway.example/mcp"


def _jwk(key: Any, kid: str, alg: str) -> dict[str, Any]:
    public: dict[str, Any] = json.loads(
        jwt.algorithms.get_default_algorithms()[alg].to_jwk(key.public_key()))
    return {**public, "kid": kid, "alg": alg, "use": "sig"}


async def measure(calls: int, rounds: int) -> dict[str, float]:
    keys = {"RS256": rsa.generate_private_key(public_exponent=65537, key_size=2048),
            "ES256": ec.generate_private_key(ec.SECP256R1())}
    document = {"keys": [_jwk(key, alg, alg) for alg, key in keys.items()]}
    body = json.dumps(document).encode()
    transport = httpx2.MockTransport(
        lambda request: httpx2.Response(200, stream=httpx2.ByteStream(body)))
    settings = OAuthSettings(issuer=ISSUER, jwks_uri=f"{ISSUER}/jwks", resource=RESOURCE,
                             allow_internal=True, required_scopes=("tools:read",),
                             roles_claim="roles")
    resource = OAuthResource(settings, RESOURCE, transport=transport)
    out: dict[str, float] = {}
    now = int(time.time())
    for alg, key in keys.items():
        def token(jti: int, alg: str = alg, key: Any = key) -> str:
            return jwt.encode({"iss": ISSUER, "aud": RESOURCE, "sub": "alice", "jti": str(jti),
                               "client_id": "app", "scope": "tools:read notes:read",
                               "roles": ["support"], "iat": now, "exp": now + 3600},
                              key, algorithm=alg, headers={"kid": alg})
        fresh = [{"authorization": f"Bearer {token(i)}"} for i in range(calls * rounds)]
        await resource.authenticate(fresh[0])  # the one fetch of the key set: warm
        repeated = fresh[0]
        algorithm = jwt.algorithms.get_default_algorithms()[alg]
        public = algorithm.prepare_key(key.public_key())
        signing, _, signature = repeated["authorization"][7:].rpartition(".")
        raw_signature = jwt.utils.base64url_decode(signature)
        figures: dict[str, list[float]] = {"first sight": [], "same token again": [],
                                           "signature check alone": []}
        for r in range(rounds):
            batch = fresh[r * calls:(r + 1) * calls]
            start = time.process_time()
            for headers in batch:
                await resource.authenticate(headers)
            figures["first sight"].append((time.process_time() - start) / calls * 1e6)
            start = time.process_time()
            for _ in range(calls):
                await resource.authenticate(repeated)
            figures["same token again"].append((time.process_time() - start) / calls * 1e6)
            start = time.process_time()
            for _ in range(calls):
                algorithm.verify(signing.encode(), public, raw_signature)
            figures["signature check alone"].append(
                (time.process_time() - start) / calls * 1e6)
        for name, values in figures.items():
            out[f"{alg} {name}"] = statistics.median(values)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    found = anyio.run(measure, args.calls, args.rounds)
    for name, micros in found.items():
        print(f"{name}: {micros:.1f} µs CPU per request (median of {args.rounds} rounds of "
              f"{args.calls})")


if __name__ == "__main__":
    main()
