#!/bin/sh
# A stand-in for the payment provider: appends one line per charge to the
# ledger ($LEDGER, default ./ledger.txt) with the idempotency key and fence
# idem handed over, and prints a receipt (stored and replayed by idem).
set -eu
op=$(cat)
ledger=${LEDGER:-ledger.txt}
printf '%s fence=%s attempt=%s %s\n' "$IDEM_KEY" "$IDEM_FENCE" "$IDEM_ATTEMPT" "$op" >> "$ledger"
printf 'receipt %s\n' "$(printf '%s' "$IDEM_KEY" | cut -c1-12)"
