#!/usr/bin/python3
"""Create the Keystone objects vnflow's Heat tests need (used by start.sh).

Get-or-create through Keystone's v3 REST API (stdlib only), so it can run any
number of times.  Settings come from the environment: KEYSTONE_URL,
HEAT_URL_TEMPLATE, ADMIN_PASSWORD, TESTER_PASSWORD, HEAT_PASSWORD,
HEAT_DOMAIN_ADMIN_PASSWORD.  Prints the id of project "vnf" on stdout.

  projects service, vnf (domain Default)
  user heat        admin on service (Heat's service user and trustee)
  user tester      member on vnf (the test user)
  role heat_stack_user
  domain heat, user heat_domain_admin (admin on domain heat): Heat's stack
                   user domain, needed for signals / scaling policies
  service heat (orchestration) with public/internal/admin endpoints
"""
import json
import os
import sys
import urllib.error
import urllib.parse
import urllib.request

ENV = os.environ
BASE = ENV['KEYSTONE_URL'].rstrip('/')


class Keystone:
    def __init__(self):
        self.token = None
        body = {'auth': {
            'identity': {'methods': ['password'], 'password': {'user': {
                'name': 'admin', 'domain': {'id': 'default'},
                'password': ENV['ADMIN_PASSWORD']}}},
            'scope': {'project': {'name': 'admin', 'domain': {'id': 'default'}}}}}
        _, headers = self.call('POST', '/auth/tokens', body, want_headers=True)
        self.token = headers['X-Subject-Token']

    def call(self, method, path, body=None, want_headers=False):
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(BASE + path, data=data, method=method)
        req.add_header('Accept', 'application/json')
        if data is not None:
            req.add_header('Content-Type', 'application/json')
        if self.token:
            req.add_header('X-Auth-Token', self.token)
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                raw = resp.read()
                parsed = json.loads(raw) if raw else None
                return (parsed, resp.headers) if want_headers else parsed
        except urllib.error.HTTPError as err:
            sys.exit('%s %s -> %s %s' % (method, path, err.code, err.read()[:500]))

    def find(self, collection, **filters):
        query = '?' + urllib.parse.urlencode(filters) if filters else ''
        items = self.call('GET', '/%s%s' % (collection, query))[collection]
        return items[0] if items else None

    def ensure(self, collection, singular, filters, fields):
        found = self.find(collection, **filters)
        if found:
            return found
        return self.call('POST', '/' + collection, {singular: fields})[singular]

    def ensure_user(self, name, password, domain_id, project_id=None):
        user = self.find('users', name=name, domain_id=domain_id)
        if user:
            # keep the password in step with the settings of this run
            self.call('PATCH', '/users/' + user['id'], {'user': {'password': password}})
            return user
        fields = {'name': name, 'domain_id': domain_id, 'password': password}
        if project_id:
            fields['default_project_id'] = project_id
        return self.call('POST', '/users', {'user': fields})['user']

    def role_id(self, name):
        return self.ensure('roles', 'role', {'name': name}, {'name': name})['id']

    def grant(self, role, user, project=None, domain=None):
        target = 'projects/' + project if project else 'domains/' + domain
        self.call('PUT', '/%s/users/%s/roles/%s' % (target, user['id'], self.role_id(role)))


def main():
    ks = Keystone()
    service = ks.ensure('projects', 'project', {'name': 'service', 'domain_id': 'default'},
                        {'name': 'service', 'domain_id': 'default'})
    vnf = ks.ensure('projects', 'project', {'name': 'vnf', 'domain_id': 'default'},
                    {'name': 'vnf', 'domain_id': 'default', 'description': 'vnflow tests'})

    heat = ks.ensure_user('heat', ENV['HEAT_PASSWORD'], 'default', service['id'])
    ks.grant('admin', heat, project=service['id'])
    tester = ks.ensure_user('tester', ENV['TESTER_PASSWORD'], 'default', vnf['id'])
    ks.grant('member', tester, project=vnf['id'])
    ks.role_id('heat_stack_user')

    heat_domain = ks.ensure('domains', 'domain', {'name': 'heat'},
                            {'name': 'heat', 'description': 'Heat stack projects and users'})
    domain_admin = ks.ensure_user('heat_domain_admin', ENV['HEAT_DOMAIN_ADMIN_PASSWORD'],
                                  heat_domain['id'])
    ks.grant('admin', domain_admin, domain=heat_domain['id'])

    orchestration = ks.ensure('services', 'service', {'type': 'orchestration'},
                              {'name': 'heat', 'type': 'orchestration', 'enabled': True})
    url = ENV['HEAT_URL_TEMPLATE']
    for interface in ('public', 'internal', 'admin'):
        endpoint = ks.find('endpoints', service_id=orchestration['id'], interface=interface)
        if endpoint is None:
            ks.call('POST', '/endpoints', {'endpoint': {
                'service_id': orchestration['id'], 'interface': interface,
                'url': url, 'region_id': 'RegionOne', 'enabled': True}})
        elif endpoint['url'] != url:
            ks.call('PATCH', '/endpoints/' + endpoint['id'], {'endpoint': {'url': url}})
    print(vnf['id'])


if __name__ == '__main__':
    main()
