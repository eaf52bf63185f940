// Package slots computes the hash slot of a Redis key name, as a Redis
// Cluster does (the Redis Cluster specification, "Keys distribution
// model"), and gives each slot a short hash tag that maps to it: a key
// whose name holds {Tag(n)} lives in slot n.
package slots

import (
	"fmt"
	"strings"
	"sync"
)

// Count is the number of hash slots of a Redis Cluster.
const Count = 16384

// Of returns the hash slot of a Redis key name: CRC16 (XMODEM: poly 0x1021,
// init 0, no reflection) of the key's hash tag (Redis's rule: the text
// between the first '{' and the first '}' after it, when non-empty) or of
// the whole key, mod 16384.
func Of(key string) int {
	if open := strings.IndexByte(key, '{'); open >= 0 {
		if n := strings.IndexByte(key[open+1:], '}'); n > 0 {
			key = key[open+1 : open+1+n]
		}
	}
	return int(crc16(key)) & (Count - 1) // Count is a power of two
}

// Tag returns a short string s (ASCII letters/digits only, no braces) whose
// slot, as a hash tag, is slot: Of("{"+s+"}") == slot. The table of all
// Count tags is built once, on first use. Tag panics for a slot outside
// [0, Count).
func Tag(slot int) string {
	if slot < 0 || slot >= Count {
		panic(fmt.Sprintf("slots: slot %d out of range [0, %d)", slot, Count))
	}
	return tags()[slot]
}

// alphabet is what tags are made of, in the order candidates are tried.
//
// The order must never change, nor the alphabet: processes of one fleet,
// whatever release each runs, must agree on each slot's tag.
const alphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

// tags builds the table of Tag, once: each slot gets the first candidate
// that maps to it, the candidates being the strings over alphabet, shorter
// ones first, then in alphabet order (0, 1, ..., z, 00, 01, ...). Strings of
// up to three characters cover every slot.
var tags = sync.OnceValue(func() *[Count]string {
	var t [Count]string
	left := Count
	for n := 1; left > 0; n++ {
		digits := make([]int, n) // the candidate, as indexes into alphabet
		buf := make([]byte, n)
		for left > 0 {
			for i, d := range digits {
				buf[i] = alphabet[d]
			}
			if s := int(crc16(buf)) & (Count - 1); t[s] == "" {
				t[s] = string(buf)
				left--
			}
			// The next candidate of length n, as an odometer turns.
			i := n - 1
			for ; i >= 0 && digits[i] == len(alphabet)-1; i-- {
				digits[i] = 0
			}
			if i < 0 {
				break // every candidate of length n was tried
			}
			digits[i]++
		}
	}
	return &t
})

// crc16 is CRC16-CCITT in its XMODEM variant (polynomial 0x1021, initial
// value 0, bits not reflected, no final XOR), the one Redis Cluster uses:
// crc16("123456789") is 0x31C3.
func crc16[T string | []byte](b T) uint16 {
	var crc uint16
	for i := 0; i < len(b); i++ {
		crc = crc<<8 ^ crcTable[byte(crc>>8)^b[i]]
	}
	return crc
}

// crcTable holds crc16's step for each value of the byte shifted out: the
// CRC of that byte alone, computed bit by bit.
var crcTable = func() (t [256]uint16) {
	for b := range t {
		c := uint16(b) << 8
		for range 8 {
			if c&0x8000 != 0 {
				c = c<<1 ^ 0x1021
			} else {
				c <<= 1
			}
		}
		t[b] = c
	}
	return t
}()
