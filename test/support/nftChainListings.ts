/** A table of a fake netns: `family name` (one chain `c`), or a ref; `chains: false` for a table without chains. */
export type FakeNftTable = string | { family: string; name: string; chains?: boolean };

export interface NftChainListings {
  /** `nft -j list chains` */
  json: string;
  /** `nft list chains`: a header for every table, chains or not, names printed raw as nft does. */
  text: string;
  /** Whether `nft -c -j -f -` of this `{"nftables":[{"delete":{"table":…}}, …]}` document succeeds: every table is there. */
  deletable(document: string): boolean;
}

/** What nft 1.0.6 prints for `nft -j list chains` and `nft list chains` in a netns holding `tables`. */
export function nftChainListings(...tables: FakeNftTable[]): NftChainListings {
  const refs = tables.map((t) => {
    if (typeof t !== 'string') return { family: t.family, name: t.name, chains: t.chains !== false };
    const [family = '', ...name] = t.split(' ');
    return { family, name: name.join(' '), chains: true };
  });
  const chains = refs.filter((t) => t.chains).map((t, i) => ({ chain: { family: t.family, table: t.name, name: 'c', handle: i + 1 } }));
  return {
    json: JSON.stringify({
      nftables: [{ metainfo: { version: '1.0.6', release_name: 'Lester Gooch #5', json_schema_version: 1 } }, ...chains],
    }),
    text: refs.map((t) => `table ${t.family} ${t.name} {\n${t.chains ? '\tchain c {\n\t}\n' : ''}}\n`).join(''),
    deletable(document) {
      const { nftables } = JSON.parse(document) as { nftables: { delete: { table: { family: string; name: string } } }[] };
      return nftables.every(({ delete: { table } }) => refs.some((t) => t.family === table.family && t.name === table.name));
    },
  };
}
