"""``gpupool agent``: publish this node's CDI inventory on its Node."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from webhook.cli.common import (
    EXIT_OK,
    UsageError,
    add_command,
    add_kube_flags,
    positive,
)


def cmd_agent(args: argparse.Namespace) -> int:
    import logging

    from webhook.cluster.kube import KubeError, api_client
    from webhook.node.agent import KubeNodeClient, Observer, Publisher, run

    for d in args.cdi_dir:  # a typo would otherwise read as "no specs on this node"
        if not os.path.isdir(d):
            print(f"warning: --cdi-dir {d}: no such directory (yet); specs written there "
                  "later are read on the next look", file=sys.stderr)
    observer = Observer(spec_dirs=args.cdi_dir or None, nvidia_config=args.runtime_config,
                        containerd_config=args.containerd_config, host_root=args.host_root,
                        driver_gpus_dir=args.driver_gpus_dir or None,
                        kubelet_checkpoint=args.kubelet_checkpoint or None,
                        settle_seconds=args.settle_seconds)
    api = None
    only_print = args.print and args.once
    if args.node_name and (args.plugin_pods or not only_print):
        try:
            api = api_client(kubeconfig=args.kubeconfig, context=args.context,
                             in_cluster=not args.kubeconfig and not args.context)
        except KubeError as exc:
            if not only_print:
                raise
            print(f"note: the device plugin's pods are not looked at ({exc}): the printed "
                  "inventory has no 'plugins'", file=sys.stderr)
    if api is not None and args.plugin_pods:
        from webhook.node.pluginpods import KubePluginPods

        # (looked at before printing too: what --print shows is what would be published)
        observer.plugin_pods = KubePluginPods(api, args.node_name, args.plugin_pods_interval)
    if args.print:
        if not args.node_name and args.plugin_pods:
            print("note: without --node-name (or NODE_NAME) the device plugin's pods are not "
                  "looked at: the printed inventory has no 'plugins'", file=sys.stderr)
        print(observer.observe().dumps())
        held = observer.held()
        if held is not None:
            print(held.dumps())
        if args.once:
            return EXIT_OK
    if not args.node_name or api is None:
        raise UsageError("--node-name is required to publish (or set NODE_NAME; or use "
                         "--once --print to only print)")
    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    publisher = Publisher(KubeNodeClient(api, args.node_name))
    if args.once:
        publisher.publish(observer.observe())
        held = observer.held()
        if held is not None:
            publisher.publish_held(held)
        return EXIT_OK
    run(observer, publisher, poll_interval=args.poll_interval)
    return EXIT_OK


def register(sub: Any, prog: str) -> None:
    ag = add_command(sub, "agent", "publish this node's CDI inventory on its Node", f"""
        # what the agent would publish on this machine
        {prog} agent --once --print
        # as the DaemonSet runs it
        {prog} agent --node-name "$NODE_NAME\"""")
    ag.add_argument("--node-name", default=os.environ.get("NODE_NAME"),
                    help="the Node to annotate (default: $NODE_NAME)")
    ag.add_argument("--cdi-dir", action="append", default=[], metavar="DIR",
                    help="CDI spec directory, in priority order (default: /etc/cdi, /var/run/cdi"
                         " or containerd's cdi_spec_dirs)")
    ag.add_argument("--runtime-config", metavar="FILE", help="the NVIDIA runtime's config.toml")
    ag.add_argument("--containerd-config", metavar="FILE",
                    help="containerd's config.toml (the drop-ins it imports are read too)")
    ag.add_argument("--host-root", default="", metavar="DIR",
                    help="where the host's root is mounted, for containerd's absolute import "
                         "paths (the DaemonSet: /host)")
    ag.add_argument("--driver-gpus-dir", default="/proc/driver/nvidia/gpus", metavar="DIR",
                    help="where the NVIDIA driver lists the node's GPUs ('' to not read it)")
    ag.add_argument("--kubelet-checkpoint", default="", metavar="FILE",
                    help="the kubelet's device-manager checkpoint: the MIG devices the "
                         "device plugin registered, and what each pod holds, published as "
                         "gpupool.io/held-devices for the scan (the DaemonSet: /host/var/lib/"
                         "kubelet/device-plugins/kubelet_internal_checkpoint)")
    ag.add_argument("--plugin-pods", action=argparse.BooleanOptionalAction, default=True,
                    help="learn how the device plugin hands GPUs from its pods on this node "
                         "(needs pods list and configmaps get; default: on)")
    ag.add_argument("--plugin-pods-interval", type=positive(float), default=300.0,
                    metavar="SECONDS", help="how often to look at the device-plugin pods "
                                            "(default: %(default)s)")
    ag.add_argument("--once", action="store_true", help="observe (and publish) once, then exit")
    ag.add_argument("--print", action="store_true",
                    help="print the annotation values (the inventory; with "
                         "--kubelet-checkpoint, what the pods hold on a second line)")
    ag.add_argument("--poll-interval", type=positive(float), default=30.0, metavar="SECONDS",
                    help="how often to look at the node's files (default: %(default)s)")
    ag.add_argument("--settle-seconds", type=float, default=5.0, metavar="SECONDS",
                    help="how long a changed file that fails to parse keeps its last good content")
    add_kube_flags(ag, "kubeconfig (default: the pod's service account)", request_timeout=False)
    ag.set_defaults(func=cmd_agent)

