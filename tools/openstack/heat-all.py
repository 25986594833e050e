#!/usr/bin/python3
"""heat-all (Heat API + engine in one process) with two runtime adjustments.

usage: HEAT_TASK_POLL_SECS=0.2 heat-all.py --config-file heat.conf

1. Debian 12's python3-oslo.messaging (14.0.3-0+deb12u1) rebuilds the
   context of every notification with ctxt.__class__.from_dict(subset).
   Heat 19's StoredContext then fetches roles/domain ids from Keystone on
   first access although they were already set, and fails without
   credentials ("Keystone API connection failed, no password trust or
   auth_token!"), e.g. when an OS::Heat::ScalingPolicy is signalled.  The
   adjusted properties fetch only a value that is still missing, as later
   Heat releases do.
2. HEAT_TASK_POLL_SECS caps the sleep (1 s) between two polls of an
   in-progress resource; every fake OpenStack resource is a nested stack, so
   this sleep dominates the duration of a test.
"""
import os
import sys

# heat.cmd.all monkey-patches eventlet on import: import it before the rest.
from heat.cmd import all as heat_all  # noqa: I100
from heat.common import context as heat_context
from heat.engine import scheduler


def fetch_when_missing(field):
    slot = '_' + field

    def read(self):
        if getattr(self, slot, None) is None and not getattr(self, '_keystone_loaded', False):
            self._load_keystone_data()
        return getattr(self, slot, None)

    def write(self, value):
        setattr(self, slot, value)

    return property(read, write)


def adjust_stored_context():
    for field in ('roles', 'user_domain_id', 'project_domain_id'):
        setattr(heat_context.StoredContext, field, fetch_when_missing(field))


def cap_poll_interval(cap):
    stock_sleep = scheduler.TaskRunner._sleep

    def capped_sleep(self, wait_time):
        if wait_time is not None:
            wait_time = min(wait_time, cap)
        return stock_sleep(self, wait_time)

    scheduler.TaskRunner._sleep = capped_sleep


def main():
    adjust_stored_context()
    cap = float(os.environ.get('HEAT_TASK_POLL_SECS', '1'))
    if 0 < cap < 1:
        cap_poll_interval(cap)
    sys.exit(heat_all.main())


if __name__ == '__main__':
    main()
