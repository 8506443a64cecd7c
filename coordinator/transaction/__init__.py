"""The transaction coordinator (KIP-98): `__transaction_state`, the transaction state machine,
the marker channel and the KIP-890 verification client. Wiring: `wiring.attach_transaction_
coordinator(services, listener)`; handlers in `broker/handlers/transactions*.py`."""
