import pulumi
import pulumi_kubernetes as k8s
from probe import Probe

cfg = pulumi.Config()
ns = cfg.require("namespace")
greeting = cfg.get("greeting") or "hello"
labels = {"app": "testbed"}

cm = k8s.core.v1.ConfigMap(
    "greeting", metadata={"namespace": ns, "name": "greeting"}, data={"greeting": greeting}
)
probe = Probe("probe", greeting)
dep = k8s.apps.v1.Deployment(
    "worker",
    metadata={"namespace": ns, "name": "testbed-worker"},
    spec={
        "replicas": 1,
        "selector": {"matchLabels": labels},
        "template": {
            "metadata": {"labels": labels, "annotations": {"testbed/digest": probe.digest}},
            "spec": {
                "containers": [
                    {
                        "name": "worker",
                        "image": "registry.example/worker:1",
                        "env": [
                            {"name": "TEMPORAL_ADDRESS", "value": cfg.require("temporalAddress")},
                            {"name": "TEMPORAL_NAMESPACE", "value": "default"},
                            {"name": "TEMPORAL_TASK_QUEUE", "value": cfg.require("taskQueue")},
                            {
                                "name": "POD_NAME",
                                "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}},
                            },
                        ],
                    }
                ]
            },
        },
    },
)
pulumi.export("deployment", dep.metadata["name"])
pulumi.export("digest", probe.digest)
pulumi.export("providerPid", probe.providerPid)
