"""The connector model: profiles, which connectors a run covers, what each needs, the servers it uses."""
