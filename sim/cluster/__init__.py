"""Simulated cluster actors that run against the API emulator: controllers, scheduler, kubelets."""
