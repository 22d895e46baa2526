"""A job for the multi-host fault tests: gcl all-reduces in a loop, so every instance waits on
every host all the time.

``poprun-emu ... host_program.py MARKS STEPS``: each instance leaves ``MARKS/running-<i>``
once it has done a few collectives (the sign to inject a fault), and at the end prints the
last sum and its host's name.
"""

import os
import sys
import time

import numpy as np
import popdist

import gcl

instance, local = popdist.getInstanceIndex(), popdist.getNumLocalReplicas()
total = 0.0
for step in range(int(sys.argv[2])):
    total = gcl.all_reduce([np.full(2, instance + 1.0, np.float32)] * local)[0][0]
    if step == 3:
        open(os.path.join(sys.argv[1], f"running-{instance}"), "w").close()
    time.sleep(0.05)
print("total", total, "host", os.uname().nodename)
