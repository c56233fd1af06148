"""Test support, in one place (not in the product): private brokers (`brokers`), device
processes and report collection (`devices`), the C client built for tests (`c_client`),
service helpers (`service`: campaigns, `ServeProcess.wait_counts`, publishers) and the cases
of the wire-contract vectors (`vectors`, also read by tools/gen_vectors.py)."""
