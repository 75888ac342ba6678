"""DRA node service v1beta1 (`k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin`)."""
