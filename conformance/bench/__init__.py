"""``kvconform bench``: connector save/load throughput beside the platform's own baseline."""
