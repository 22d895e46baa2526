"""A PopDist host program: prints the layout this instance gets from PopRun.

Written against the real PopDist API only, so it runs unchanged under Graphcore's ``poprun``
and under the emulator:

    poprun-emu --num-replicas 16 --num-instances 4 python3 examples/popdist_client.py

Each instance prints one line (tagged ``[1,<i>]<stdout>:`` by the launcher); ``--json`` prints
the same view as one JSON object instead, for scripts and tests.
"""

import argparse
import json

import popdist


def instance_view() -> dict:
    """Everything PopDist tells this instance about the job and its own place in it."""
    return {
        "isPopdistEnvSet": popdist.isPopdistEnvSet(),
        "getNumTotalReplicas": popdist.getNumTotalReplicas(),
        "getNumLocalReplicas": popdist.getNumLocalReplicas(),
        "getNumInstances": popdist.getNumInstances(),
        "getInstanceIndex": popdist.getInstanceIndex(),
        "getLocalInstanceIndex": popdist.getLocalInstanceIndex(),
        "getReplicaIndexOffset": popdist.getReplicaIndexOffset(),
        "getNumIpusPerReplica": popdist.getNumIpusPerReplica(),
        "getDeviceId": popdist.getDeviceId(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the view as JSON")
    args = parser.parse_args()
    view = instance_view()
    if args.json:
        print(json.dumps(view, sort_keys=True))
        return
    # As host code often does: one instance prints what is common to the job.
    popdist.execute_on_instances(
        {0},
        print,
        f"job: {view['getNumTotalReplicas']} replicas on {view['getNumInstances']} instances, "
        f"{view['getNumIpusPerReplica']} IPUs per replica",
    )
    first = view["getReplicaIndexOffset"]
    last = first + view["getNumLocalReplicas"] - 1
    print(
        f"instance {view['getInstanceIndex']} (local index {view['getLocalInstanceIndex']}): "
        f"{view['getNumLocalReplicas']} local replicas, global replicas {first}-{last}, "
        f"replica offset {first}, device id {view['getDeviceId']}"
    )


if __name__ == "__main__":
    main()
