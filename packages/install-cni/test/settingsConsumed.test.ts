import assert from 'node:assert/strict';
import { readdirSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';
import { SETTING_SPECS, SettingsError, resolveSettings } from '../src/settings/index.ts';
import type { SettingSpec } from '../src/settings/settingSpecs.ts';

/**
 * Every setting in `--help` is either read by code that acts on it or refused at start. The
 * readers are found with the type checker: a property access (or destructuring) whose symbol is a
 * property of `Settings` (or of its nested groups), anywhere in packages/<pkg>/src except
 * `resolveSettings` itself, which only writes and validates them.
 */

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../../..');
const SETTINGS_FILE = join(ROOT, 'packages/install-cni/src/settings/settings.ts');

/**
 * Settings read where this scan cannot see it. Each entry says where.
 */
const ALLOW_LIST: Readonly<Record<string, string>> = {};

const STRING_CANDIDATES = ['127.0.0.1', '5s', '- podSelector: {matchLabels: {a: b}}', '/x/y'];

function candidates(spec: SettingSpec): string[] {
  switch (spec.kind) {
    case 'bool':
      return [spec.default === 'true' ? 'false' : 'true'];
    case 'int':
    case 'port':
      return ['7'];
    case 'mode':
      return ['0644'];
    case 'list':
      return ['a,b'];
    default:
      return STRING_CANDIDATES;
  }
}

/** Dotted paths of `Settings` whose value differs between two resolutions. */
function changedPaths(a: unknown, b: unknown, prefix = ''): string[] {
  if (typeof a === 'object' && a !== null && !Array.isArray(a) && typeof b === 'object' && b !== null) {
    return Object.keys(a).flatMap((k) =>
      changedPaths((a as Record<string, unknown>)[k], (b as Record<string, unknown>)[k], prefix ? `${prefix}.${k}` : k),
    );
  }
  return JSON.stringify(a) === JSON.stringify(b) ? [] : [prefix];
}

type Outcome = { refused: string } | { paths: string[] };

/** What setting `spec` to a value other than its default does: refused, or which settings it changes. */
function outcome(spec: SettingSpec): Outcome {
  const host = { hostname: () => 'node-a' };
  const base = resolveSettings({}, {}, host);
  const failures: string[] = [];
  for (const value of candidates(spec)) {
    try {
      const paths = changedPaths(base, resolveSettings({}, { [spec.env]: value }, host));
      if (paths.length > 0) return { paths };
      failures.push(`${value}: no change`);
    } catch (err) {
      if (!(err instanceof SettingsError)) throw err;
      if (err.message.startsWith(`${spec.env}=`) && err.message.includes(' is not supported: ')) return { refused: err.message };
      failures.push(err.message);
    }
  }
  assert.fail(`${spec.env}: no test value both valid and effective; teach candidates() one (${failures.join('; ')})`);
}

function sourceFiles(): string[] {
  const out: string[] = [];
  const walk = (dir: string): void => {
    for (const e of readdirSync(dir, { withFileTypes: true })) {
      const p = join(dir, e.name);
      if (e.isDirectory()) walk(p);
      else if (p.endsWith('.ts')) out.push(p);
    }
  };
  for (const pkg of readdirSync(join(ROOT, 'packages'))) walk(join(ROOT, 'packages', pkg, 'src'));
  return out;
}

/** `path` of each Settings property read outside resolveSettings (`repair.deletePods`, `excludeNamespaces`). */
function readSettingsPaths(): Set<string> {
  const config = ts.getParsedCommandLineOfConfigFile(
    join(ROOT, 'tsconfig.base.json'),
    {},
    {
      ...ts.sys,
      onUnRecoverableConfigFileDiagnostic: (d) => assert.fail(ts.flattenDiagnosticMessageText(d.messageText, '\n')),
    },
  );
  assert.ok(config);
  const program = ts.createProgram(sourceFiles(), { ...config.options, noEmit: true, composite: false });
  const checker = program.getTypeChecker();
  const settingsSource = program.getSourceFile(SETTINGS_FILE);
  assert.ok(settingsSource);

  // Property declaration -> dotted path, for Settings and the interfaces its properties are typed with.
  const pathOf = new Map<ts.Declaration, string>();
  const interfaces = new Map<string, ts.InterfaceDeclaration>();
  let resolveFn: ts.Node | undefined;
  ts.forEachChild(settingsSource, (n) => {
    if (ts.isInterfaceDeclaration(n)) interfaces.set(n.name.text, n);
    if (ts.isFunctionDeclaration(n) && n.name?.text === 'resolveSettings') resolveFn = n;
  });
  assert.ok(resolveFn);
  const addInterface = (name: string, prefix: string): void => {
    const decl = interfaces.get(name);
    assert.ok(decl, name);
    for (const m of decl.members) {
      if (!ts.isPropertySignature(m) || !ts.isIdentifier(m.name)) continue;
      const path = prefix + m.name.text;
      pathOf.set(m, path);
      if (m.type && ts.isTypeReferenceNode(m.type) && ts.isIdentifier(m.type.typeName) && interfaces.has(m.type.typeName.text)) {
        addInterface(m.type.typeName.text, `${path}.`);
      }
    }
  };
  addInterface('Settings', '');

  const read = new Set<string>();
  const note = (symbol: ts.Symbol | undefined): void => {
    for (const d of symbol?.declarations ?? []) {
      const path = pathOf.get(d);
      if (path !== undefined) read.add(path);
    }
  };
  for (const file of program.getSourceFiles()) {
    if (!file.fileName.startsWith(join(ROOT, 'packages'))) continue;
    const visit = (node: ts.Node): void => {
      if (node === resolveFn) return;
      if (ts.isPropertyAccessExpression(node)) note(checker.getSymbolAtLocation(node.name));
      else if (ts.isElementAccessExpression(node)) note(checker.getSymbolAtLocation(node.argumentExpression));
      else if (ts.isBindingElement(node) && ts.isObjectBindingPattern(node.parent)) {
        const key = node.propertyName ?? node.name;
        if (ts.isIdentifier(key)) note(checker.getTypeAtLocation(node.parent).getProperty(key.text));
      }
      ts.forEachChild(node, visit);
    };
    visit(file);
  }
  return read;
}

test('every setting in --help is read by code that acts on it, or refused at start', () => {
  const read = readSettingsPaths();
  const unread: string[] = [];
  for (const spec of SETTING_SPECS) {
    const o = outcome(spec);
    if ('refused' in o) continue;
    if (o.paths.some((p) => read.has(p))) continue;
    if (ALLOW_LIST[spec.env] !== undefined) continue;
    unread.push(`${spec.env} (${o.paths.join(', ')})`);
  }
  assert.deepEqual(unread, [], 'settings nothing reads: implement them, or refuse a value other than the default at start');
});

test('the scan sees readers: a setting read only through a nested group and one read by a helper', () => {
  const read = readSettingsPaths();
  assert.ok(read.has('repair.deletePods'), 'repair.deletePods');
  assert.ok(read.has('nodeTaint.key'), 'nodeTaint.key');
  // Read through isOwnedMode (settings.ts), which the installer calls.
  assert.ok(read.has('istioOwnedCniConfig'), 'istioOwnedCniConfig');
});

test('the allow-list names only settings that exist and are not refused', () => {
  for (const env of Object.keys(ALLOW_LIST)) {
    const spec = SETTING_SPECS.find((s) => s.env === env);
    assert.ok(spec, env);
    assert.ok(!('refused' in outcome(spec)), env);
  }
});
