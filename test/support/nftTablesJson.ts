/** `nft -j list tables` output for tables given as `family name` (handles 1, 2, … in order), or as refs. */
export function nftTablesJson(...tables: (string | { family: string; name: string; handle?: number })[]): string {
  const entries = tables.map((t, i) => {
    if (typeof t !== 'string') return { table: { family: t.family, name: t.name, handle: t.handle ?? i + 1 } };
    const [family = '', ...name] = t.split(' ');
    return { table: { family, name: name.join(' '), handle: i + 1 } };
  });
  return JSON.stringify({
    nftables: [{ metainfo: { version: '1.0.6', release_name: 'Lester Gooch #5', json_schema_version: 1 } }, ...entries],
  });
}
