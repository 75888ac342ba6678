"""DRA node service v1 (`k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin`)."""
