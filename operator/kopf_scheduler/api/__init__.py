"""Parsed forms of Kubernetes objects: quantities, selectors, taints, pods and nodes."""
