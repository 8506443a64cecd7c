"""Delegation tokens (KIP-48; Kafka's ``DelegationTokenManagerZk``).

* Enabled by ``delegation.token.secret.key`` (or the deprecated
  ``delegation.token.master.key``); otherwise every token API answers
  DELEGATION_TOKEN_AUTH_DISABLED. All brokers of a cluster share the secret.
* A token is (id, owner, requester, renewers, issue/expiry/max timestamps) plus
  ``hmac = HMAC-SHA512(secret, token id)``. ``delegation.token.max.lifetime.ms`` (7 days)
  bounds its life, ``delegation.token.expiry.time.ms`` (1 day) is the default renew period.
* Stored as ``/delegation_token/tokens/<id>``: ``{"version":3,"owner":"User%3Aalice",
  "tokenRequester":...,"renewers":[...],"issueTimestamp":..,"maxTimestamp":..,
  "expiryTimestamp":..,"tokenId":".."}`` (principals sanitized), changes announced as
  ``/delegation_token/token_changes/token_change_<seq>`` holding the token id.
* Clients authenticate with SCRAM (either mechanism) using ``tokenauth=true``, the token id
  as user name and ``base64(hmac)`` as password; each broker derives the SCRAM credentials
  (4096 iterations, in an executor) and the session lives at most until the token expires.
* Expired tokens are removed every ``delegation.token.expiry.check.interval.ms``.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac as _hmac
import json
import logging
import time
import uuid
from dataclasses import dataclass, field

from broker.security import znodes
from broker.security.principal import KafkaPrincipal, parse_principal
from common.security.scram import MECHANISMS, ScramCredential, credential_from_password
from controller.change_listener import ChangeNotificationListener
from controller.znode_store import ZNodeStore, ensure_path, upsert
from protocol.errors import ErrorCode

__all__ = ["DelegationTokenManager", "TokenInfo"]

log = logging.getLogger("broker.security.tokens")

TOKENS = "/delegation_token/tokens"
CHANGES = "/delegation_token/token_changes"
CHANGE_PREFIX = "token_change_"


@dataclass
class TokenInfo:
    token_id: str
    owner: KafkaPrincipal
    requester: KafkaPrincipal
    renewers: list[KafkaPrincipal]
    issue_ms: int
    max_ms: int
    expiry_ms: int
    hmac: bytes = b""
    credentials: dict[str, ScramCredential] = field(default_factory=dict)

    def owner_or_renewer(self, p: KafkaPrincipal) -> bool:
        key = (p.principal_type, p.name)
        return key == (self.owner.principal_type, self.owner.name) or any(
            key == (r.principal_type, r.name) for r in self.renewers)

    def encode(self) -> bytes:
        return json.dumps({
            "version": 3, "owner": znodes.sanitize(str(self.owner)),
            "tokenRequester": znodes.sanitize(str(self.requester)),
            "renewers": [znodes.sanitize(str(r)) for r in self.renewers],
            "issueTimestamp": self.issue_ms, "maxTimestamp": self.max_ms,
            "expiryTimestamp": self.expiry_ms, "tokenId": self.token_id},
            separators=(",", ":")).encode()

    @classmethod
    def decode(cls, data: bytes) -> TokenInfo:
        doc = json.loads(data)
        version = int(doc["version"])
        if not 0 < version <= 3:
            raise ValueError(f"unsupported version {version}")
        owner = parse_principal(znodes.desanitize(doc["owner"]))
        requester = parse_principal(znodes.desanitize(doc["tokenRequester"])) \
            if version >= 3 else owner
        return cls(str(doc["tokenId"]), owner, requester,
                   [parse_principal(znodes.desanitize(r)) for r in doc["renewers"]],
                   int(doc["issueTimestamp"]), int(doc["maxTimestamp"]),
                   int(doc["expiryTimestamp"]))


class DelegationTokenManager:
    def __init__(self, config, *, clock_ms=lambda: int(time.time() * 1000)) -> None:
        secret = config.get("delegation.token.secret.key") or \
            config.get("delegation.token.master.key")
        self.secret = secret.encode() if secret else None
        self.max_lifetime_ms = config.get("delegation.token.max.lifetime.ms")
        self.renew_ms = config.get("delegation.token.expiry.time.ms")
        self.check_interval_ms = config.get("delegation.token.expiry.check.interval.ms")
        self.clock_ms = clock_ms
        self.store: ZNodeStore | None = None
        self.tokens: dict[str, TokenInfo] = {}
        self._by_hmac: dict[bytes, str] = {}
        self._lock = asyncio.Lock()
        self._changes: ChangeNotificationListener | None = None
        self._tasks: list[asyncio.Task] = []

    @property
    def enabled(self) -> bool:
        return self.secret is not None

    def hmac_of(self, token_id: str) -> bytes:
        return _hmac.new(self.secret, token_id.encode(), hashlib.sha512).digest()

    # ---- lifecycle -------------------------------------------------------------------------
    async def start(self, store: ZNodeStore) -> None:
        self.store = store
        if not self.enabled:
            return
        await ensure_path(store, TOKENS)
        self._changes = ChangeNotificationListener(store, CHANGES, CHANGE_PREFIX,
                                                   self._process_change, clock_ms=self.clock_ms)
        await self._changes.start(skip_existing=True)  # watch first: no change is missed
        for token_id in await store.get_children(TOKENS):
            await self._load(token_id)
        loop = asyncio.get_running_loop()
        self._tasks.append(loop.create_task(self._expire_loop(), name="token-expiry"))

    async def shutdown(self) -> None:
        if self._changes is not None:
            await self._changes.shutdown()
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _load(self, token_id: str) -> None:
        node = await self.store.get(f"{TOKENS}/{token_id}")
        if node is None or not node[0]:
            self._remove_cache(token_id)
            return
        try:
            info = TokenInfo.decode(node[0])
        except (ValueError, KeyError, TypeError) as e:
            log.error("skipping delegation token znode %s/%s: %s", TOKENS, token_id, e)
            return
        await self._cache(info)

    async def _cache(self, info: TokenInfo) -> None:
        info.hmac = self.hmac_of(info.token_id)
        password = base64.b64encode(info.hmac).decode()
        old = self.tokens.get(info.token_id)
        if old is not None and old.credentials:
            info.credentials = old.credentials
        else:
            loop = asyncio.get_running_loop()
            for name, mech in MECHANISMS.items():  # PBKDF2: off the loop
                info.credentials[name] = await loop.run_in_executor(
                    None, credential_from_password, mech, password, mech.min_iterations)
        self.tokens[info.token_id] = info
        self._by_hmac[info.hmac] = info.token_id

    def _remove_cache(self, token_id: str) -> None:
        info = self.tokens.pop(token_id, None)
        if info is not None:
            self._by_hmac.pop(info.hmac, None)

    async def _process_change(self, path: str, data: bytes | None) -> None:
        """A ``token_change_`` notification names a token id: re-read that token."""
        if data:
            await self._load(data.decode("utf-8", "replace"))

    async def _persist(self, info: TokenInfo) -> None:
        await upsert(self.store, f"{TOKENS}/{info.token_id}", info.encode())
        await self.store.create(f"{CHANGES}/{CHANGE_PREFIX}", info.token_id.encode(),
                                sequential=True)

    async def _remove(self, token_id: str) -> None:
        await self.store.delete(f"{TOKENS}/{token_id}")
        self._remove_cache(token_id)
        await self.store.create(f"{CHANGES}/{CHANGE_PREFIX}", token_id.encode(),
                                sequential=True)

    async def _expire_loop(self) -> None:
        while True:
            await asyncio.sleep(self.check_interval_ms / 1000.0)
            try:
                await self.expire_tokens()
            except Exception:  # noqa: BLE001 - keep checking
                log.exception("removing expired delegation tokens failed")

    async def expire_tokens(self) -> int:
        now = self.clock_ms()
        gone = [t for t in self.tokens.values() if t.max_ms < now or t.expiry_ms < now]
        async with self._lock:
            for t in gone:
                log.info("Delegation token expired for token: %s for owner: %s", t.token_id,
                         t.owner)
                await self._remove(t.token_id)
        return len(gone)

    # ---- the API operations ----------------------------------------------------------------
    async def create(self, owner: KafkaPrincipal, requester: KafkaPrincipal,
                     renewers: list[KafkaPrincipal], max_lifetime_ms: int) -> TokenInfo:
        token_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        now = self.clock_ms()
        lifetime = self.max_lifetime_ms if max_lifetime_ms <= 0 \
            else min(max_lifetime_ms, self.max_lifetime_ms)
        info = TokenInfo(token_id, owner, requester, list(renewers), now, now + lifetime,
                         min(now + lifetime, now + self.renew_ms))
        async with self._lock:
            await self._cache(info)
            await self._persist(info)
        log.info("Created a delegation token: %s for owner: %s", token_id, owner)
        return info

    def by_hmac(self, hmac: bytes) -> TokenInfo | None:
        token_id = self._by_hmac.get(bytes(hmac))
        return self.tokens.get(token_id) if token_id is not None else None

    def _owned(self, principal: KafkaPrincipal, hmac: bytes
               ) -> tuple[TokenInfo | None, ErrorCode]:
        """The token of `hmac` when `principal` owns or may renew it (else the error)."""
        info = self.by_hmac(hmac)
        if info is None:
            return None, ErrorCode.DELEGATION_TOKEN_NOT_FOUND
        if not info.owner_or_renewer(principal):
            return None, ErrorCode.DELEGATION_TOKEN_OWNER_MISMATCH
        return info, ErrorCode.NONE

    async def _set_expiry(self, info: TokenInfo, now: int, period_ms: int
                          ) -> tuple[ErrorCode, int]:
        if info.max_ms < now or info.expiry_ms < now:
            return ErrorCode.DELEGATION_TOKEN_EXPIRED, -1
        info.expiry_ms = min(info.max_ms, now + period_ms)
        async with self._lock:
            await self._persist(info)
        return ErrorCode.NONE, info.expiry_ms

    async def renew(self, principal: KafkaPrincipal, hmac: bytes, period_ms: int
                    ) -> tuple[ErrorCode, int]:
        info, code = self._owned(principal, hmac)
        if info is None:
            return code, -1
        return await self._set_expiry(info, self.clock_ms(),
                                      self.renew_ms if period_ms < 0 else period_ms)

    async def expire(self, principal: KafkaPrincipal, hmac: bytes, period_ms: int
                     ) -> tuple[ErrorCode, int]:
        """Kafka's expireToken: a negative period removes the token now."""
        info, code = self._owned(principal, hmac)
        if info is None:
            return code, -1
        now = self.clock_ms()
        if period_ms < 0:
            async with self._lock:
                await self._remove(info.token_id)
            return ErrorCode.NONE, now
        return await self._set_expiry(info, now, period_ms)

    # ---- authentication (CredentialSource.token_credential) --------------------------------
    def scram_credential(self, mechanism: str, token_id: str):
        info = self.tokens.get(token_id)
        if info is None or info.expiry_ms < self.clock_ms():
            return None
        cred = info.credentials.get(mechanism)
        return None if cred is None else (cred, info.owner, info.expiry_ms)
