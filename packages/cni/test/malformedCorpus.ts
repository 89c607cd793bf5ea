/**
 * Inputs a CNI plugin must refuse before any of its own code runs. Every case
 * must end with exit 1, a CNI error JSON on stdout carrying `code`, and no
 * handler called. Shared with the exec-level test of the built plugin, so env
 * values are plain strings (no NUL: an OS environment cannot hold one).
 */
import { ErrorCode } from '@istio-cni/cni';

export interface MalformedCase {
  name: string;
  env: Record<string, string>;
  stdin: Buffer;
  code: number;
  /** A substring the error's `msg` must contain. */
  msg?: string;
}

const FULL_ENV: Record<string, string> = {
  CNI_CONTAINERID: 'c0ffee',
  CNI_NETNS: '/var/run/netns/test',
  CNI_IFNAME: 'eth0',
  CNI_PATH: '/opt/cni/bin',
  CNI_ARGS: 'IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-0',
};

function envFor(command: string, overrides: Record<string, string | undefined> = {}): Record<string, string> {
  const env: Record<string, string> = { CNI_COMMAND: command, ...FULL_ENV };
  for (const [k, v] of Object.entries(overrides)) {
    if (v === undefined) delete env[k];
    else env[k] = v;
  }
  return env;
}

const conf = (extra: Record<string, unknown> = {}, cniVersion = '1.0.0'): Buffer =>
  Buffer.from(JSON.stringify({ cniVersion, name: 'k8s-pod-network', type: 'istio-cni', ...extra }));

const GOOD = conf();
const cases: MalformedCase[] = [];
const add = (c: MalformedCase): void => {
  cases.push(c);
};

// Environment: every required variable of every command, missing or empty.
const REQUIRED: Record<string, string[]> = {
  ADD: ['CNI_CONTAINERID', 'CNI_NETNS', 'CNI_IFNAME', 'CNI_PATH'],
  CHECK: ['CNI_CONTAINERID', 'CNI_NETNS', 'CNI_IFNAME', 'CNI_PATH'],
  DEL: ['CNI_CONTAINERID', 'CNI_IFNAME', 'CNI_PATH'],
  GC: ['CNI_PATH'],
  STATUS: ['CNI_PATH'],
};
for (const [command, vars] of Object.entries(REQUIRED)) {
  const stdin = command === 'GC' || command === 'STATUS' ? conf({}, '1.1.0') : GOOD;
  for (const name of vars) {
    add({
      name: `${command} without ${name}`,
      env: envFor(command, { [name]: undefined }),
      stdin,
      code: ErrorCode.InvalidEnvironment,
      msg: name,
    });
    add({
      name: `${command} with empty ${name}`,
      env: envFor(command, { [name]: '' }),
      stdin,
      code: ErrorCode.InvalidEnvironment,
      msg: name,
    });
  }
}
add({
  name: 'ADD with no CNI_* variable but the command',
  env: { CNI_COMMAND: 'ADD' },
  stdin: GOOD,
  code: ErrorCode.InvalidEnvironment,
  msg: 'required env variables [CNI_CONTAINERID,CNI_NETNS,CNI_IFNAME,CNI_PATH] missing',
});
for (const command of ['add', 'FOO', 'GET', ' ADD', 'ADD ', 'DELETE', 'version']) {
  add({
    name: `unknown command ${JSON.stringify(command)}`,
    env: envFor(command),
    stdin: GOOD,
    code: ErrorCode.InvalidEnvironment,
    msg: 'unknown CNI_COMMAND',
  });
}

// Container IDs the reference validation rejects.
for (const id of ['-abc', '.abc', '_abc', 'a b', 'a/b', 'a;b', 'a:b', 'abc$', 'caf\u00e9', 'a\nb', '../../etc']) {
  for (const command of ['ADD', 'DEL']) {
    add({
      name: `${command} with container ID ${JSON.stringify(id)}`,
      env: envFor(command, { CNI_CONTAINERID: id }),
      stdin: GOOD,
      code: ErrorCode.InvalidEnvironment,
      msg: 'invalid characters in containerID',
    });
  }
}

// Interface names the kernel would refuse.
const IFNAMES: [string, string][] = [
  ['a'.repeat(16), 'interface name is too long'],
  ['\u00e9'.repeat(8), 'interface name is too long'],
  ['.', 'interface name is . or ..'],
  ['..', 'interface name is . or ..'],
  ['eth/0', 'contains / or : or whitespace'],
  ['eth:0', 'contains / or : or whitespace'],
  ['eth 0', 'contains / or : or whitespace'],
  ['eth\t0', 'contains / or : or whitespace'],
  ['eth0\n', 'contains / or : or whitespace'],
  ['\u00a0eth0', 'contains / or : or whitespace'],
];
for (const [ifName, msg] of IFNAMES) {
  add({
    name: `ADD with interface name ${JSON.stringify(ifName)}`,
    env: envFor('ADD', { CNI_IFNAME: ifName }),
    stdin: GOOD,
    code: ErrorCode.InvalidEnvironment,
    msg,
  });
}
add({
  name: 'CHECK with interface name "eth/0"',
  env: envFor('CHECK', { CNI_IFNAME: 'eth/0' }),
  stdin: GOOD,
  code: ErrorCode.InvalidEnvironment,
});
add({
  name: 'DEL with a 16-byte interface name',
  env: envFor('DEL', { CNI_IFNAME: 'x'.repeat(16) }),
  stdin: GOOD,
  code: ErrorCode.InvalidEnvironment,
});

// Bogus netns paths: skel never looks at the path before its version checks,
// so these must still be refused for the config, never reach the handler.
for (const netns of ['not-a-path', '/proc/self/ns/net\u00e9', ' ', '/dev/null', 'x'.repeat(5000)]) {
  add({
    name: `CHECK at 0.3.1 with netns ${JSON.stringify(netns.slice(0, 24))}`,
    env: envFor('CHECK', { CNI_NETNS: netns }),
    stdin: conf({}, '0.3.1'),
    code: ErrorCode.IncompatibleVersion,
    msg: 'config version does not allow CHECK',
  });
  add({
    name: `ADD with netns ${JSON.stringify(netns.slice(0, 24))} and no JSON`,
    env: envFor('ADD', { CNI_NETNS: netns }),
    stdin: Buffer.from('netns'),
    code: ErrorCode.DecodingFailure,
  });
}

// Stdin that is not a JSON object.
const NOT_JSON: [string, Buffer, number, string][] = [
  ['empty stdin', Buffer.alloc(0), ErrorCode.DecodingFailure, 'unexpected end of JSON input'],
  ['whitespace only', Buffer.from(' \n\t '), ErrorCode.DecodingFailure, 'unexpected end of JSON input'],
  ['plain text', Buffer.from('hello'), ErrorCode.DecodingFailure, "invalid character 'h' looking for beginning of value"],
  ['truncated object', Buffer.from('{"cniVersion":"1.0.0","name":"k8s'), ErrorCode.DecodingFailure, 'unexpected end of JSON input'],
  ['truncated after colon', Buffer.from('{"cniVersion":"1.0.0","name":'), ErrorCode.DecodingFailure, 'unexpected end of JSON input'],
  [
    'trailing comma',
    Buffer.from('{"name":"n",}'),
    ErrorCode.DecodingFailure,
    "invalid character '}' looking for beginning of object key string",
  ],
  ['single quotes', Buffer.from("{'name':'n'}"), ErrorCode.DecodingFailure, 'looking for beginning of object key string'],
  ['unquoted key', Buffer.from('{name:"n"}'), ErrorCode.DecodingFailure, 'looking for beginning of object key string'],
  ['trailing garbage', Buffer.from('{"name":"n"} x'), ErrorCode.DecodingFailure, "invalid character 'x' after top-level value"],
  ['two objects', Buffer.from('{"name":"n"}{"name":"m"}'), ErrorCode.DecodingFailure, 'after top-level value'],
  ['byte order mark', Buffer.from('\ufeff{"name":"n"}'), ErrorCode.DecodingFailure, 'looking for beginning of value'],
  ['NUL byte alone', Buffer.from([0]), ErrorCode.DecodingFailure, "invalid character '\\x00' looking for beginning of value"],
  ['NUL byte inside a string', Buffer.from('{"name":"a\u0000b"}'), ErrorCode.DecodingFailure, 'in string literal'],
  ['NUL byte after the object', Buffer.concat([conf(), Buffer.from([0])]), ErrorCode.DecodingFailure, 'after top-level value'],
  ['raw newline in a string', Buffer.from('{"name":"a\nb"}'), ErrorCode.DecodingFailure, 'in string literal'],
  ['bad escape', Buffer.from('{"name":"a\\qb"}'), ErrorCode.DecodingFailure, 'in string escape code'],
  ['bad unicode escape', Buffer.from('{"name":"\\u12g4"}'), ErrorCode.DecodingFailure, 'hexadecimal character escape'],
  ['invalid UTF-8 outside strings', Buffer.from([0xff, 0xfe]), ErrorCode.DecodingFailure, 'looking for beginning of value'],
  ['NaN literal', Buffer.from('{"name":NaN}'), ErrorCode.DecodingFailure, 'looking for beginning of value'],
  ['leading zero number', Buffer.from('{"name":"n","x":01}'), ErrorCode.DecodingFailure, 'after object key:value pair'],
  ['misspelt literal', Buffer.from('{"name":"n","x":tru}'), ErrorCode.DecodingFailure, 'in literal true'],
  ['top-level array', Buffer.from('[]'), ErrorCode.DecodingFailure, 'cannot unmarshal array'],
  ['top-level string', Buffer.from('"k8s-pod-network"'), ErrorCode.DecodingFailure, 'cannot unmarshal string'],
  ['top-level number', Buffer.from('42'), ErrorCode.DecodingFailure, 'cannot unmarshal number'],
  ['top-level bool', Buffer.from('true'), ErrorCode.DecodingFailure, 'cannot unmarshal bool'],
  ['top-level null', Buffer.from('null'), ErrorCode.InvalidNetworkConfig, 'missing network name'],
  ['empty object', Buffer.from('{}'), ErrorCode.InvalidNetworkConfig, 'missing network name'],
  ['array nesting past 10000', Buffer.from('['.repeat(10001)), ErrorCode.DecodingFailure, 'exceeded max depth'],
  [
    'object nesting past 10000 inside a config',
    Buffer.from('{"name":"n","x":' + '{"a":'.repeat(10000) + '1' + '}'.repeat(10001)),
    ErrorCode.DecodingFailure,
    'exceeded max depth',
  ],
  [
    '8 MiB unterminated string',
    Buffer.concat([Buffer.from('{"name":"n","pad":"'), Buffer.alloc(8 * 1024 * 1024, 0x61)]),
    ErrorCode.DecodingFailure,
    'unexpected end of JSON input',
  ],
  [
    '8 MiB valid config of an unknown version',
    conf({ pad: 'a'.repeat(8 * 1024 * 1024) }, '9.9.9'),
    ErrorCode.IncompatibleVersion,
    'incompatible CNI versions',
  ],
];
for (const [name, stdin, code, msg] of NOT_JSON) add({ name, env: envFor('ADD'), stdin, code, msg });
add({ name: 'DEL with empty stdin', env: envFor('DEL'), stdin: Buffer.alloc(0), code: ErrorCode.DecodingFailure });
add({ name: 'CHECK with plain text', env: envFor('CHECK'), stdin: Buffer.from('check'), code: ErrorCode.DecodingFailure });
add({ name: 'GC with truncated JSON', env: envFor('GC'), stdin: Buffer.from('{"cniVersion":"1.1.0"'), code: ErrorCode.DecodingFailure });
add({ name: 'STATUS with empty stdin', env: envFor('STATUS'), stdin: Buffer.alloc(0), code: ErrorCode.DecodingFailure });
add({
  name: 'unknown command with bad JSON reports the JSON first',
  env: envFor('FOO'),
  stdin: Buffer.from('{'),
  code: ErrorCode.DecodingFailure,
});

// Wrong types and values for each standard field.
const WRONG: [string, unknown][] = [
  ['number', 7],
  ['bool', true],
  ['array', ['x']],
  ['object', { a: 1 }],
];
for (const [kind, value] of WRONG) {
  add({
    name: `name as ${kind}`,
    env: envFor('ADD'),
    stdin: Buffer.from(JSON.stringify({ cniVersion: '1.0.0', name: value, type: 'istio-cni' })),
    code: ErrorCode.DecodingFailure,
    msg: `cannot unmarshal ${kind}`,
  });
  add({
    name: `cniVersion as ${kind}`,
    env: envFor('ADD'),
    stdin: conf({ cniVersion: value }),
    code: ErrorCode.DecodingFailure,
    msg: `cannot unmarshal ${kind}`,
  });
  add({ name: `type as ${kind}`, env: envFor('ADD'), stdin: conf({ type: value }), code: ErrorCode.DecodingFailure, msg: 'type' });
}
for (const name of ['', '-net', 'my net', 'net/0', 'n\u00e9t', '.hidden']) {
  add({ name: `network name ${JSON.stringify(name)}`, env: envFor('ADD'), stdin: conf({ name }), code: ErrorCode.InvalidNetworkConfig });
}
add({
  name: 'name null',
  env: envFor('ADD'),
  stdin: conf({ name: null }),
  code: ErrorCode.InvalidNetworkConfig,
  msg: 'missing network name',
});

// Versions.
for (const v of ['9.9.9', '1.0', '1.2.0', '0.5.0', 'a.b.c', '1.0.0.0', 'v1.0.0', ' 1.0.0', '1.0.0-rc1']) {
  add({
    name: `ADD at cniVersion ${JSON.stringify(v)}`,
    env: envFor('ADD'),
    stdin: conf({}, v),
    code: ErrorCode.IncompatibleVersion,
    msg: 'incompatible CNI versions',
  });
}
add({ name: 'DEL at cniVersion "2.0.0"', env: envFor('DEL'), stdin: conf({}, '2.0.0'), code: ErrorCode.IncompatibleVersion });
for (const v of ['', '0.1.0', '0.2.0', '0.3.0', '0.3.1']) {
  add({
    name: `CHECK at cniVersion ${JSON.stringify(v)}`,
    env: envFor('CHECK'),
    stdin: conf({}, v),
    code: ErrorCode.IncompatibleVersion,
    msg: 'config version does not allow CHECK',
  });
}
add({
  name: 'CHECK at cniVersion "a.b.c"',
  env: envFor('CHECK'),
  stdin: conf({}, 'a.b.c'),
  code: ErrorCode.DecodingFailure,
  msg: 'failed to convert major version part "a"',
});
add({
  name: 'CHECK at cniVersion "1.0.0.0"',
  env: envFor('CHECK'),
  stdin: conf({}, '1.0.0.0'),
  code: ErrorCode.DecodingFailure,
  msg: 'too many parts',
});
add({
  name: 'CHECK at cniVersion "2.0.0"',
  env: envFor('CHECK'),
  stdin: conf({}, '2.0.0'),
  code: ErrorCode.IncompatibleVersion,
  msg: 'plugin version does not allow CHECK',
});
add({
  name: 'CHECK at cniVersion "0.5.0"',
  env: envFor('CHECK'),
  stdin: conf({}, '0.5.0'),
  code: ErrorCode.IncompatibleVersion,
  msg: 'incompatible CNI versions',
});
for (const v of ['1.0.0', '0.4.0', '0.1.0']) {
  add({
    name: `GC at cniVersion ${v}`,
    env: envFor('GC'),
    stdin: conf({}, v),
    code: ErrorCode.IncompatibleVersion,
    msg: 'config version does not allow GC',
  });
  add({
    name: `STATUS at cniVersion ${v}`,
    env: envFor('STATUS'),
    stdin: conf({}, v),
    code: ErrorCode.IncompatibleVersion,
    msg: 'config version does not allow STATUS',
  });
}
add({ name: 'GC at cniVersion "x"', env: envFor('GC'), stdin: conf({}, 'x'), code: ErrorCode.DecodingFailure });

// Malformed prevResults.
const PREV: [string, unknown, string][] = [
  ['a string', 'result', 'prevResult'],
  ['an array', [], 'prevResult'],
  ['of another version family', { cniVersion: '0.4.0' }, 'unmarshalled CNIVersion is "0.4.0"'],
  ['without cniVersion', { ips: [] }, 'unmarshalled CNIVersion is ""'],
  ['with interfaces as an object', { cniVersion: '1.0.0', interfaces: {} }, 'interfaces'],
  ['with an interface name number', { cniVersion: '1.0.0', interfaces: [{ name: 5 }] }, 'interfaces[0].name'],
  ['with a bad address', { cniVersion: '1.0.0', ips: [{ address: '10.0.0.300/24' }] }, 'ips[0].address'],
  ['with an address without prefix', { cniVersion: '1.0.0', ips: [{ address: '10.0.0.3' }] }, 'ips[0].address'],
  ['with a missing address', { cniVersion: '1.0.0', ips: [{ gateway: '10.0.0.1' }] }, 'ips[0].address'],
  ['with a bad gateway', { cniVersion: '1.0.0', ips: [{ address: '10.0.0.3/24', gateway: 'gw' }] }, 'ips[0].gateway'],
  ['with a negative interface index', { cniVersion: '1.0.0', ips: [{ address: '10.0.0.3/24', interface: -1 }] }, 'ips[0].interface'],
  ['with a fractional interface index', { cniVersion: '1.0.0', ips: [{ address: '10.0.0.3/24', interface: 0.5 }] }, 'ips[0].interface'],
  ['with a null ip entry', { cniVersion: '1.0.0', ips: [null] }, 'ips[0]'],
  ['with a bad route dst', { cniVersion: '1.0.0', routes: [{ dst: 'default' }] }, 'routes[0].dst'],
  ['with a string route mtu', { cniVersion: '1.0.0', routes: [{ dst: '0.0.0.0/0', mtu: '1500' }] }, 'routes[0].mtu'],
  ['with dns as a list', { cniVersion: '1.0.0', dns: [] }, 'dns'],
  ['with a number nameserver', { cniVersion: '1.0.0', dns: { nameservers: [53] } }, 'dns.nameservers[0]'],
];
for (const [name, prevResult, msg] of PREV) {
  add({ name: `prevResult ${name}`, env: envFor('ADD'), stdin: conf({ prevResult }), code: ErrorCode.DecodingFailure, msg });
}
add({
  name: 'prevResult 0.4.0 with ip version "5"',
  env: envFor('ADD'),
  stdin: conf({ prevResult: { cniVersion: '0.4.0', ips: [{ version: '5', address: '10.0.0.3/24' }] } }, '0.4.0'),
  code: ErrorCode.DecodingFailure,
  msg: 'ips[0].version',
});
add({
  name: 'prevResult 0.2.0 with ip4 holding IPv6',
  env: envFor('ADD'),
  stdin: conf({ prevResult: { cniVersion: '0.2.0', ip4: { ip: 'fd00::3/64' } } }, '0.2.0'),
  code: ErrorCode.DecodingFailure,
  msg: 'ip4.ip',
});

/** The corpus; the 8 MiB inputs make it ~25 MB in memory. */
export const malformedCorpus: readonly MalformedCase[] = cases;
