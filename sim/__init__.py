"""The simulated cluster: API emulator, scheduler, kubelets, fake fabric."""
