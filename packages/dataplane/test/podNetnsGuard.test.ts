import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  PodNetnsRefusedError,
  podNetnsRefusal,
  resolveCniNetnsPath,
  type NetnsReferences,
  type NsFileFacts,
} from '../src/podNetnsGuard.ts';

const NSFS = 4;
const NODE = { dev: NSFS, ino: 4026531840 };
const AGENT = { dev: NSFS, ino: 4026532001 };
const refs: NetnsReferences = { nsfsDev: NSFS, node: NODE, own: AGENT };
const pod = (ino: number, type = 'net'): NsFileFacts => ({ dev: NSFS, ino, type });

describe('podNetnsRefusal', () => {
  it("accepts a network namespace that is neither the node's nor our own", () => {
    assert.equal(podNetnsRefusal(pod(4026532500), refs), undefined);
  });

  it("refuses the node's netns, whatever path led to it (same inode)", () => {
    assert.equal(podNetnsRefusal(pod(NODE.ino), refs), "it is the node's own network namespace");
  });

  it("refuses the netns istio-cni runs in when it is not the node's", () => {
    assert.equal(podNetnsRefusal(pod(AGENT.ino), refs), 'it is the network namespace istio-cni itself runs in');
  });

  it("reports the node's netns first when istio-cni runs in it (host network)", () => {
    assert.equal(podNetnsRefusal(pod(NODE.ino), { ...refs, own: NODE }), "it is the node's own network namespace");
  });

  it("with pid 1 out of reach, our own netns stands in for the node's and says so", () => {
    assert.match(
      podNetnsRefusal(pod(AGENT.ino), { ...refs, node: undefined }) ?? '',
      /^it is the network namespace istio-cni runs in \(which stands in for the node's: pid 1 cannot be inspected\)$/,
    );
    assert.equal(podNetnsRefusal(pod(4026532500), { ...refs, node: undefined }), undefined);
  });

  it('refuses files off nsfs (regular files, directories) even when the inode number collides', () => {
    assert.equal(podNetnsRefusal({ dev: 65024, ino: 4026532500, type: undefined }, refs), 'it is not a namespace file');
    assert.equal(podNetnsRefusal({ dev: 65024, ino: NODE.ino, type: 'net' }, refs), 'it is not a namespace file');
  });

  it('refuses other namespace types and namespaces of unknown type', () => {
    assert.equal(podNetnsRefusal(pod(4026531832, 'mnt'), refs), 'it is a mnt namespace, not a network namespace');
    assert.equal(podNetnsRefusal({ dev: NSFS, ino: 4026531832, type: undefined }, refs), 'it is not recognisable as a network namespace');
  });

  it('compares the device too, not the inode alone', () => {
    assert.equal(podNetnsRefusal({ dev: NSFS, ino: NODE.ino, type: 'net' }, { ...refs, node: { dev: 99, ino: NODE.ino } }), undefined);
  });
});

describe('resolveCniNetnsPath', () => {
  it('keeps what runtimes send (containerd, cri-o, /proc) and places it under the host root', () => {
    assert.equal(resolveCniNetnsPath('/var/run/netns/cni-1234'), '/var/run/netns/cni-1234');
    assert.equal(resolveCniNetnsPath('/var/run/netns/0b1c', '/host'), '/host/var/run/netns/0b1c');
    assert.equal(resolveCniNetnsPath('/proc/4242/ns/net', '/host'), '/host/proc/4242/ns/net');
  });

  it('resolves ".." and never climbs above the host root', () => {
    assert.equal(resolveCniNetnsPath('/var/run/netns/../../../proc/1/ns/net'), '/proc/1/ns/net');
    assert.equal(resolveCniNetnsPath('/../../proc/1/ns/net', '/host'), '/host/proc/1/ns/net');
    assert.equal(resolveCniNetnsPath('/var/run/netns/./x//y/..', '/host'), '/host/var/run/netns/x');
  });

  it('refuses relative paths and NUL bytes', () => {
    assert.equal(resolveCniNetnsPath('var/run/netns/x'), undefined);
    assert.equal(resolveCniNetnsPath(''), undefined);
    assert.equal(resolveCniNetnsPath('/var/run/netns/x\0y'), undefined);
  });
});

describe('PodNetnsRefusedError', () => {
  it('names the netns as given and, when different, as resolved', () => {
    const plain = new PodNetnsRefusedError('/proc/1/ns/net', "it is the node's own network namespace");
    assert.equal(plain.message, 'refusing network namespace "/proc/1/ns/net": it is the node\'s own network namespace');
    assert.equal(plain.netns, '/proc/1/ns/net');
    const resolved = new PodNetnsRefusedError('/var/run/netns/../../proc/1/ns/net', 'x', { resolved: '/host/proc/1/ns/net' });
    assert.equal(resolved.message, 'refusing network namespace "/var/run/netns/../../proc/1/ns/net" (resolved "/host/proc/1/ns/net"): x');
    assert.equal(new PodNetnsRefusedError('/a', 'x', { resolved: '/a' }).message, 'refusing network namespace "/a": x');
  });
});
