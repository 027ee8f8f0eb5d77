"""The Petrel Kubernetes operator: a ``PetrelBroker`` custom resource run as a StatefulSet with a PVC
per broker, drainer Jobs on the PVCs a scale-down leaves, a PVC deleted only after its drain
succeeded; on the same decision core as the local orchestrator
(:mod:`petrel.orchestrator.reconcile`).

:mod:`~petrel.operator.crd` the resource and its CRD, :mod:`~petrel.operator.manifests` the
objects of one resource, :mod:`~petrel.operator.backend` objects to observations and actions to
API calls and status, :mod:`~petrel.operator.handlers` the kopf handlers and the API client,
:mod:`~petrel.operator.deploy` RBAC and the operator's Deployment. Only ``handlers`` needs kopf
and kubernetes (``pip install 'petrel[k8s]'``), and imports them when the operator runs.
"""
