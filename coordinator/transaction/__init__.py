"""The transaction coordinator (KIP-98): `__transaction_state`, the transaction state machine
and the marker channel. Wiring: `broker.coordinator_wiring.attach_transaction_coordinator(
services, listener)`; the partition leader's side (KIP-890 verification, writing markers) is
`broker.txn_verification` / `broker.txn_markers`; handlers in `broker/handlers/transactions*.py`."""
