"""The host's side of the contract, replicated in Python for the native cases
runner: operation canonicalisation, key hashing, derivation checks, the
decision gate and the cases-file format. Policies never import it (a policy
does not hash or canonicalise: the host does)."""
