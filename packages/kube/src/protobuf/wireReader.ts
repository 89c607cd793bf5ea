/**
 * Reads the protobuf wire format (https://protobuf.dev/programming-guides/encoding/) from a
 * byte range. Every read is bounds-checked: a truncated or malformed message throws
 * {@link ProtobufError}, never reads past its range.
 */

export class ProtobufError extends Error {
  override name = 'ProtobufError';
}

export const WIRE_VARINT = 0;
export const WIRE_FIXED64 = 1;
export const WIRE_LEN = 2;
export const WIRE_FIXED32 = 5;

const utf8 = new TextDecoder('utf-8', { fatal: true });

export class WireReader {
  private pos: number;
  private readonly end: number;
  private readonly buf: Uint8Array;

  constructor(buf: Uint8Array, start = 0, end = buf.length) {
    this.buf = buf;
    this.pos = start;
    this.end = end;
  }

  done(): boolean {
    return this.pos >= this.end;
  }

  /** The next field's number and wire type. */
  tag(): { field: number; wire: number } {
    const t = this.varint();
    const field = Math.floor(t / 8);
    if (field === 0) throw new ProtobufError('field number 0');
    return { field, wire: t % 8 };
  }

  /**
   * A varint as a number: exact up to 2^53, which covers every int64 field read here (user and
   * group IDs, Unix seconds); a 64-bit two's complement value (a negative int32 or int64 is sent
   * sign-extended, in ten bytes) comes back negative.
   */
  varint(): number {
    const start = this.pos;
    let result = 0;
    for (let i = 0, scale = 1; i < 7; i++, scale *= 128) {
      if (this.pos >= this.end) throw new ProtobufError('truncated varint');
      const b = this.buf[this.pos++] as number;
      result += (b & 0x7f) * scale;
      if (b < 0x80) return result;
    }
    // Past 49 bits a float loses precision: read it again exactly.
    this.pos = start;
    let big = 0n;
    for (let i = 0n; i < 10n; i++) {
      if (this.pos >= this.end) throw new ProtobufError('truncated varint');
      const b = this.buf[this.pos++] as number;
      big |= BigInt(b & 0x7f) << (7n * i);
      if (b < 0x80) return Number(BigInt.asIntN(64, big));
    }
    throw new ProtobufError('varint longer than 10 bytes');
  }

  int32(): number {
    return this.varint() | 0;
  }

  bool(): boolean {
    return this.varint() !== 0;
  }

  /** A length-delimited field's bytes, as a view into the buffer. */
  bytes(): Uint8Array {
    const n = this.varint();
    if (n > this.end - this.pos) throw new ProtobufError('length past the end of the message');
    const out = this.buf.subarray(this.pos, this.pos + n);
    this.pos += n;
    return out;
  }

  string(): string {
    try {
      return utf8.decode(this.bytes());
    } catch (err) {
      if (err instanceof ProtobufError) throw err;
      throw new ProtobufError('string field is not UTF-8');
    }
  }

  /** Skips a field of the given wire type. */
  skip(wire: number): void {
    switch (wire) {
      case WIRE_VARINT:
        this.varint();
        return;
      case WIRE_FIXED64:
        this.advance(8);
        return;
      case WIRE_LEN:
        this.advance(this.varint());
        return;
      case WIRE_FIXED32:
        this.advance(4);
        return;
      default:
        throw new ProtobufError(`unsupported wire type ${wire}`);
    }
  }

  private advance(n: number): void {
    if (n > this.end - this.pos) throw new ProtobufError('field past the end of the message');
    this.pos += n;
  }
}
